"""The Jupyter magics in a real notebook, executed by Debian's nbclient on an ipykernel: `%load_ext wattscope`,
`%%wattscope` cells measured by a separate `wattscope record --socket` (the kernel finds this user's default socket by
itself), `%wattscope_summary`, and the cells stored as phases of the recorder's run. Two stand-in GPUs at a constant
200 W and 100 W: a cell's true energy is 300 W times its length."""

import json
import os

import nbclient
import nbformat
import pytest

from test_windows import start_record, stop


def cell_text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def test_a_notebook_measures_its_cells(steady_world, monkeypatch):
    w = steady_world
    rec = start_record(w)
    try:
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell("%load_ext wattscope"),
            nbformat.v4.new_code_cell("%%wattscope warmup\nimport time\ntime.sleep(0.6)\nanswer = 41 + 1\nanswer"),
            nbformat.v4.new_code_cell("%%wattscope\ntime.sleep(0.3)\nraise ValueError('a cell that fails')"),
            nbformat.v4.new_code_cell("%wattscope_summary"),
            nbformat.v4.new_code_cell("import json, wattscope\n"
                                      "print(json.dumps([m.as_dict() for m in wattscope.measurements()]))"),
        ]
        for key in ("XDG_RUNTIME_DIR", "PYTHONPATH"):  # the kernel inherits them: the default socket, the package
            monkeypatch.setenv(key, w.env[key])
        # IPython's profile and Jupyter's runtime, data and config files in this test's directory, not the home's
        for key, sub in (("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"),
                         ("JUPYTER_DATA_DIR", "jupyter-data"), ("JUPYTER_CONFIG_DIR", "jupyter-config")):
            monkeypatch.setenv(key, os.path.join(w.path, sub))
        monkeypatch.delenv("WATTSCOPE_SOCKET", raising=False)
        client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                                         resources={"metadata": {"path": w.path}})
        client.execute()
    finally:
        stop(rec)
    warmup, failing, summary, dump = nb.cells[1:]
    assert "wattscope: warmup: " in cell_text(warmup) and " J in " in cell_text(warmup), warmup.outputs
    # the cell's own value is shown as any cell's is
    assert any(o.get("output_type") == "execute_result" and o["data"]["text/plain"] == "42" for o in warmup.outputs)
    # a failing cell is reported as the kernel reports it, and still measured
    assert any(o.get("output_type") == "error" and o["ename"] == "ValueError" for o in failing.outputs)
    assert " J in " in cell_text(failing), failing.outputs
    text = cell_text(summary)
    assert "warmup" in text and "total" in text, text
    measured = json.loads(cell_text(dump))
    assert [m["name"] for m in measured][0] == "warmup" and measured[1]["name"].startswith("cell")
    for m in measured:
        assert m["method"] == "counter" and m["error"] is None, m
        assert m["energy_j"] == pytest.approx(300 * m["duration_s"], rel=0.01), m
    assert measured[0]["duration_s"] >= 0.59
    shown = w.show(measured[0]["run_id"])
    stored = {p["name"]: p["energy_j"] for p in shown["phases"]}
    for m in measured:
        assert stored[m["name"]] == pytest.approx(m["energy_j"], abs=1e-6)
