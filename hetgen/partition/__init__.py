"""The partition stage: Graph + Platform -> Placement (each operator group -> a target path + why).

Pattern tables say what each device could run (`patterns`, `predicates`); the cost model prices it
(`cost`); the search decides (`search`); `explain` says why.
"""

from hetgen.partition.cost import Calibration, calibrate
from hetgen.partition.explain import explain_dot, explain_json, explain_text
from hetgen.partition.placement import Alternative, Group, Placement, Transfer
from hetgen.partition.search import DEFAULT_MAX_STATES, place

__all__ = [
    "Alternative",
    "Calibration",
    "DEFAULT_MAX_STATES",
    "Group",
    "Placement",
    "Transfer",
    "calibrate",
    "explain_dot",
    "explain_json",
    "explain_text",
    "place",
]
