"""The board catalogue (platforms/boards/, docs/boards.md): real SoCs as platform tags.

Fast: every tag loads by name and by path, its header says what it models, what it cannot, whether it
runs under emulation and where its figures come from, and every number it sets cites a source.
External: every tag generates and cross-builds a small CNN with its real toolchain; where its root has
an emulator the board program runs there and matches onnxruntime, and where it has none the test's id
says build-only and a second test is skipped with the reason from the file.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest

import hetgen
from hetgen.cli import main
from hetgen.models import tiny_cnn
from hetgen.platform.banks import bank_of, default_banks
from hetgen.platform.catalogue import board_files, emulator_name, header_lines
from hetgen.platform.loader import load_platform
from hetgen.platform.search_path import find_platform
from hetgen.runtime.verify import verify
from hetgen.templates_dir import boards_dir

REPO = Path(__file__).resolve().parent.parent
FILES = board_files()
TAGS = [path.stem for path in FILES]
FAST = {"opt": ("-O2",), "native_tuning": False}
SECTIONS = ("Models:", "Cannot model:", "Emulation:", "Sources:")
# `key: number  # ... [n] ...`: a number is an int, a hex address or a decimal
NUMBER_LINE = re.compile(r"^\s*(?:- )?[A-Za-z_][\w-]*:\s*(-?(?:0x[0-9A-Fa-f]+|[0-9][0-9_]*(?:\.[0-9]+)?))\s*(#.*)?$")
CITE = re.compile(r"\[(\d+)\]")
EM = {"aarch64-linux-gnu": 183, "riscv64-linux-gnu": 243, "arm-none-eabi": 40}


def sections(path: Path) -> dict[str, str]:
    """The header's sections (`Models:`, ...): each its text up to the next section or blank line."""
    found: dict[str, list[str]] = {}
    current = None
    for line in header_lines(path):
        head = next((s for s in SECTIONS if line.startswith(s)), None)
        if head:
            current = head
            found[head] = [line[len(head) :].strip()]
        elif current and line.strip():
            found[current].append(line.strip())
        else:
            current = None
    return {key: " ".join(part for part in lines if part) for key, lines in found.items()}


def sources(path: Path) -> dict[int, str]:
    """`Sources:` entries, `[n] document, section: figures`, by number."""
    entries = re.split(r"(?=\[\d+\] )", sections(path).get("Sources:", ""))
    return {int(CITE.match(e).group(1)): e for e in entries if CITE.match(e)}


def body_lines(path: Path) -> list[tuple[int, str]]:
    return [
        (number, line)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_catalogue_holds_at_least_twelve_tags_none_shadowing_a_shipped_platform():
    assert len(TAGS) >= 12, TAGS
    shipped = {path.stem for path in (REPO / "platforms").glob("*.y*ml")}
    assert not shipped & set(TAGS), "a catalogue tag would be hidden by (or hide) platforms/<tag>.yaml"
    assert boards_dir().resolve() == (REPO / "platforms/boards").resolve()


@pytest.mark.parametrize("path", FILES, ids=TAGS)
def test_tag_loads_by_name_and_by_path_alike(path):
    assert find_platform(path.stem).resolve() == path.resolve()
    assert load_platform(path.stem) == load_platform(path)


@pytest.mark.parametrize("path", FILES, ids=TAGS)
def test_header_says_what_is_modelled_what_is_not_and_where_it_runs(path):
    found = sections(path)
    assert set(SECTIONS) <= set(found), f"{path.name}: the header needs {SECTIONS}, has {sorted(found)}"
    assert all(len(found[s]) > 20 for s in SECTIONS[:3]), found
    root = load_platform(path).root
    emulation = found["Emulation:"]
    if root.toolchain.emulator:
        assert emulation.startswith(emulator_name(root.toolchain.emulator)), (emulation, root.toolchain.emulator)
    else:
        assert emulation.startswith("build-only;"), f"{path.name}: no emulator, so 'Emulation: build-only; why'"


@pytest.mark.parametrize("path", FILES, ids=TAGS)
def test_every_figure_cites_a_listed_source_and_every_source_is_cited(path):
    """The rule: the header's `Sources:` lists documents as `[n] name, section: what it gives`,
    numbered from 1; each line of the file that sets a number (one key a line: no flow mappings
    holding numbers) ends in a comment citing at least one `[n]` of them; every source is cited."""
    listed = sources(path)
    assert listed and sorted(listed) == list(range(1, len(listed) + 1)), listed
    assert all(len(text) > 30 for text in listed.values()), listed
    cited: set[int] = set()
    for number, line in body_lines(path):
        assert not ("{" in line.split("#")[0] and re.search(r"\d", line.split("#")[0])), (
            f"{path.name}:{number}: figures go one to a line, each with its source: {line.strip()}"
        )
        match = NUMBER_LINE.match(line)
        if match:
            refs = {int(n) for n in CITE.findall(match.group(2) or "")}
            assert refs, f"{path.name}:{number}: '{line.strip()}' cites no source ([n] of the Sources: block)"
            assert refs <= set(listed), f"{path.name}:{number}: cites {sorted(refs - set(listed))}, not listed"
            cited |= refs
    # a source may also be cited from another figure's comment
    cited |= {int(n) for _, line in body_lines(path) if "#" in line for n in CITE.findall(line.split("#", 1)[1])}
    assert cited == set(listed), f"{path.name}: sources never cited: {sorted(set(listed) - cited)}"


def test_the_rule_catches_an_uncited_figure(tmp_path):
    good = FILES[0].read_text(encoding="utf-8")
    bad = tmp_path / FILES[0].name
    bad.write_text(re.sub(r"(\n\s+\w+: \d+)\s+#[^\n]*", r"\1", good, count=1), encoding="utf-8")
    with pytest.raises(AssertionError, match="cites no source"):
        test_every_figure_cites_a_listed_source_and_every_source_is_cited(bad)


def test_hetgen_boards_lists_every_tag(capsys):
    assert main(["boards"]) == 0
    listing = capsys.readouterr().out
    for path in FILES:
        (line,) = [row for row in listing.splitlines() if row.split(" ")[0] == path.stem]
        assert ("build-only" in line) == (not load_platform(path).root.toolchain.emulator)


def elf_header(path: Path) -> tuple[int, int]:
    """(e_machine, e_entry) of a little-endian ELF."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF", f"{path} is not an ELF file"
    entry = struct.unpack_from("<I" if data[4] == 1 else "<Q", data, 24)[0]  # ELFCLASS32 or 64
    return struct.unpack_from("<H", data, 18)[0], entry


def board_id(path: Path) -> str:
    emulator = load_platform(path).root.toolchain.emulator
    return f"{path.stem}-{emulator_name(emulator).replace(' ', '') if emulator else 'build-only'}"


@pytest.mark.external
@pytest.mark.parametrize("path", FILES, ids=[board_id(p) for p in FILES])
def test_tag_cross_builds_with_its_toolchain_and_runs_where_qemu_can(tmp_path, path):
    root = load_platform(path).root
    tools = (root.toolchain.cc, *root.toolchain.emulator[:1])
    if missing := [tool for tool in tools if shutil.which(tool) is None]:
        pytest.skip(f"needs {', '.join(missing)} (the README's set-up installs them)")
    out = hetgen.compile(path, tiny_cnn(seed=1), out=tmp_path / "out", werror=True, **FAST)
    commands = json.loads((out / "compile_commands.json").read_text())
    board = [c["arguments"] for c in commands if c["output"].startswith(f"board/obj/{root.name}/")]
    assert board and all(
        args[0] == root.toolchain.cc and set(root.toolchain.cflags) <= set(args) and "-Werror" in args for args in board
    )
    (program,) = json.loads((out / "hetgen.json").read_text())["board"]["programs"]
    machine, entry = elf_header(out / program["path"])
    assert machine == EM[root.toolchain.triple]
    if root.toolchain.triple == "arm-none-eabi":  # linked at the tag's memory map: it starts in its flash
        code = bank_of(default_banks(root), "code")  # flash_*, or the bank of `memories:` that holds the code
        assert code.origin <= entry < code.origin + code.size, hex(entry)
    if root.toolchain.emulator:
        errors = verify(out, seed=3, emulate=True)
        assert errors and all(e.ok for e in errors), errors


@pytest.mark.parametrize(
    "path", [p for p in FILES if not load_platform(p).root.toolchain.emulator], ids=lambda p: p.stem
)
def test_build_only_tags_say_why_they_do_not_run(path):
    pytest.skip(f"{path.stem}: {sections(path)['Emulation:']}")


@pytest.mark.external
def test_cortex_m33_code_runs_under_mps2_an505_at_that_boards_map(tmp_path):
    """nrf5340 is build-only (no qemu machine for it), but its kind's flags and code run on qemu's
    Cortex-M33 board once linked at that board's Secure aliases (SSRAM1 at 0x10000000 for the image,
    SSRAM2/3 at 0x38000000 for the data: qemu's mps2-an505, `info mtree`)."""
    if any(shutil.which(tool) is None for tool in ("arm-none-eabi-gcc", "qemu-system-arm")):
        pytest.skip("needs arm-none-eabi-gcc and qemu-system-arm (the README's set-up installs them)")
    platform = tmp_path / "m33.yaml"
    platform.write_text(
        "name: m33\ntarget:\n  kind: cortex-m33\n  runtime: aot\n  flash_origin: 0x10000000\n  flash_kib: 4096\n"
        "  ram_origin: 0x38000000\n  ram_kib: 2048\n  toolchain:\n    emulator: [qemu-system-arm, -M, mps2-an505]\n"
    )
    out = hetgen.compile(platform, tiny_cnn(seed=1), out=tmp_path / "out", werror=True, **FAST)
    commands = json.loads((out / "compile_commands.json").read_text())
    assert all("-mcpu=cortex-m33" in c["arguments"] for c in commands if c["output"].startswith("board/obj/m33/"))
    errors = verify(out, seed=3, emulate=True)
    assert errors and all(e.ok for e in errors), errors
