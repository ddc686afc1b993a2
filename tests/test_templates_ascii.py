"""Generated sources are ASCII (tests/test_names.py reads them so): names from a model reach them
only escaped, so the templates themselves must be ASCII, comments included."""

from __future__ import annotations

from hetgen.templates_dir import templates_dir


def test_every_template_is_ascii():
    offenders = []
    for path in sorted(templates_dir().rglob("*")):
        if path.is_file():
            for number, line in enumerate(path.read_bytes().splitlines(), start=1):
                if not line.isascii():
                    offenders.append(f"{path.relative_to(templates_dir())}:{number}")
    assert not offenders, f"non-ASCII characters in templates: {offenders}"
