"""Jupyter: `%load_ext wattscope`, then

    %%wattscope evaluate
    model.eval(); score = evaluate(model, loader)

prints the cell's energy, duration and method once the cell has run (and the cell is a phase of the run measuring
it); `%wattscope_summary` lists the cells measured so far in this notebook with their total.

The meter is a wattscope on the same machine: the notebook server started under `wattscope run -- jupyter lab`, or,
simplest, `wattscope record --socket` in a terminal of the same user (the kernel finds its default socket by itself).
Without one, a cell still runs and its duration is printed, with one note saying how to measure energy.

IPython is not imported here: the kernel hands itself to load().
"""

from . import windows as _windows


class _Magics:
    def __init__(self, ipython):
        self.ipython = ipython
        self.cells = []  # the Measurements of this notebook's %%wattscope cells
        self.said_no_meter = False

    def cell(self, line, cell):
        name = line.strip()
        if not name:
            count = getattr(self.ipython, "execution_count", None)
            name = f"cell {count}" if count is not None else "cell"
        with _windows.measure(name) as m:
            # The cell as the kernel runs any cell: its last expression shown, its exception reported (not raised
            # through the magic, which would hide the figures).
            self.ipython.run_cell(cell, store_history=False)
        self.cells.append(m)
        print(self.line(m))

    def line(self, m):
        if m.energy_j is not None:
            return f"wattscope: {m}"
        text = f"wattscope: {m.name}: {m.duration_s:.3g} s"
        if not self.said_no_meter:
            self.said_no_meter = True
            text += (f"; energy not measured ({m.error}). Start `wattscope record --socket` in a terminal (same user), "
                     f"or run the notebook server under `wattscope run`")
        return text

    def summary(self, line=""):
        if not self.cells:
            print("wattscope: no %%wattscope cell has run yet")
            return
        width = max(len(m.name) for m in self.cells)
        print(f"{'cell':<{width}}  {'duration':>10}  {'energy':>10}  method")
        total_j, total_s, unmeasured = 0.0, 0.0, 0
        for m in self.cells:
            energy = _windows._joules(m.energy_j) if m.energy_j is not None else "–"
            print(f"{m.name:<{width}}  {m.duration_s or 0:>8.3g} s  {energy:>10}  {m.method or 'not measured'}")
            total_s += m.duration_s or 0
            if m.energy_j is None:
                unmeasured += 1
            else:
                total_j += m.energy_j
        note = f" ({unmeasured} cell{'s' if unmeasured != 1 else ''} not measured)" if unmeasured else ""
        print(f"{'total':<{width}}  {total_s:>8.3g} s  {_windows._joules(total_j):>10}{note}")


def load(ipython):
    magics = _Magics(ipython)
    ipython.register_magic_function(magics.cell, magic_kind="cell", magic_name="wattscope")
    ipython.register_magic_function(magics.summary, magic_kind="line", magic_name="wattscope_summary")
