"""docs/captures.md ("What shapejit captures") is generated from the capture corpus and
the tables; it must be in step with them."""
from repo import tool


def _tool():
    return tool("gen_captures_doc")


def test_page_is_in_step_with_the_tables():
    tool = _tool()
    with open(tool.PAGE) as f:
        on_disk = f.read()
    assert on_disk == tool.render(), (
        "docs/captures.md is out of date: run python3 tools/gen_captures_doc.py")


def test_every_callables_row_is_listed():
    tool = _tool()
    with open(tool.PAGE) as f:
        page = f.read()
    for kind, paths in tool.callables().items():
        for path in paths:
            short = path.split(".", 1)[1] if kind != "CK_OPERATOR" and "." in path else path
            if path.startswith("torch.nn.functional."):
                short = path[len("torch.nn.functional."):]
            assert "`%s`" % short in page, (kind, path)


def test_every_break_case_has_its_reason():
    tool = _tool()
    corpus = tool._corpus()
    with open(tool.PAGE) as f:
        page = f.read()
    for e in corpus.ENTRIES:
        if e.breaks and e.module not in tool.MECHANISM_MODULES:
            row = [line for line in page.splitlines() if line.startswith("| `%s` |" % e.name)]
            assert len(row) == 1, e.name
            assert "(no break recorded)" not in row[0], e.name
