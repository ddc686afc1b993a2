"""The platform stage: a platform YAML file (or a tag naming one) becomes a validated `Platform`.

Entry points: `load_platform(spec, search_path)` and `load_platform_text(text)`; the CLI builds the
search path with `default_search_path(os.environ)`. `canonical_yaml`, `kinds_table` and
`json_schema` describe platforms and kinds for `hetgen check`, `hetgen targets` and editors.
"""

from hetgen.platform.canonical import canonical_yaml
from hetgen.platform.describe import kinds_table
from hetgen.platform.json_schema import json_schema
from hetgen.platform.kinds import builtin_kinds
from hetgen.platform.loader import load_platform, load_platform_text
from hetgen.platform.model import (
    AttrSpec,
    CostFigures,
    FrozenMap,
    Kind,
    Link,
    Pattern,
    PatternStep,
    Platform,
    Role,
    Runtime,
    SourcePos,
    Target,
    Toolchain,
)
from hetgen.platform.search_path import default_search_path, find_platform, platform_tags

__all__ = [
    "AttrSpec",
    "CostFigures",
    "FrozenMap",
    "Kind",
    "Link",
    "Pattern",
    "PatternStep",
    "Platform",
    "Role",
    "Runtime",
    "SourcePos",
    "Target",
    "Toolchain",
    "builtin_kinds",
    "canonical_yaml",
    "default_search_path",
    "find_platform",
    "json_schema",
    "kinds_table",
    "load_platform",
    "load_platform_text",
    "platform_tags",
]
