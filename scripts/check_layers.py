#!/usr/bin/env python3
"""Fails when an #include in src/ runs up the layers. Includes run one way:
core <- sources/sinks/accounting/phases/importers/alerts/forecast <- sampler/processes <- pipeline/advice <- web <- server/report/top <- cli (<- main.cpp).
A folder may include its own files and any lower layer's, never a higher one's nor a sibling's of the same layer.
Run by the build (target check_layers) and usable by hand: scripts/check_layers.py [SRC_DIR]."""
import pathlib
import re
import sys

LAYERS = {
    "core": 0, "wattscope": 0,  # wattscope/ is the generated version header
    "sources": 1, "sinks": 1, "accounting": 1, "phases": 1, "importers": 1,  # issue 15: markers, phase accounting; logs
    "alerts": 1,  # issue 14: rules, evaluation, notifiers
    "forecast": 1,  # issue 36: series models (pure arithmetic over a series)
    "sampler": 2, "processes": 2,
    "pipeline": 3, "advice": 3,  # advice (issue 14): estimators over a stored run's or the live series
    "web": 4,
    "report": 5, "top": 5,  # issue 16: top reads the pipeline's frames or serve's API, not server/
    "server": 6,  # issue 35: serve renders a stored run's report (report/) for its runs pages
    "cli": 7,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]*"', re.M)


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "src")
    bad = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".h", ".in") or not path.is_file():
            continue
        rel = path.relative_to(src)
        folder = rel.parts[0] if len(rel.parts) > 1 else None  # main.cpp sits on top of everything
        if folder is not None and folder not in LAYERS:
            bad.append(f"{rel}: folder '{folder}' has no layer in scripts/check_layers.py")
            continue
        for m in INCLUDE.finditer(path.read_text(errors="replace")):
            target = m.group(1)
            if target not in LAYERS:
                bad.append(f"{rel}: includes '{m.group(0).strip()}', a folder with no layer")
            elif folder is not None and target != folder and LAYERS[target] >= LAYERS[folder]:
                bad.append(f"{rel}: '{folder}' (layer {LAYERS[folder]}) includes '{target}/' "
                           f"(layer {LAYERS[target]}): includes must run down the layers")
    for b in bad:
        print(f"check_layers: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
