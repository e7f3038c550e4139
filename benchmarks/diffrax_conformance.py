"""diffrax's own ODE tests with lpjax's Gauss–Legendre solvers in place of diffrax's.

    python benchmarks/diffrax_conformance.py DIFFRAX_SOURCE [--stages 1 2 3] [--out benchmarks/results/] [pytest options]

``DIFFRAX_SOURCE`` is a diffrax source checkout (its ``test/`` folder; the PyPI sdist has none),
at the tag of the installed diffrax, e.g. ``git clone --branch v0.7.2
https://github.com/patrick-kidger/diffrax``. Not part of ``make test``: it needs that checkout.

The test folder is copied to a temporary directory and changed in two places only:
``helpers.all_ode_solvers`` becomes ``lpjax.diffrax.GaussLegendre(s)`` for the given s (and
``all_split_solvers`` empty: these need two-term ``MultiTerm`` solvers), and the solver list of
``test_integrate.py::test_basic`` the same. Then it runs, under diffrax's own conftest (x64,
strict dtype promotion), ``test_integrate.py::test_basic``, ``test_integrate.py::test_ode_order``,
``test_detest.py``, ``test_global_interpolation.py`` and ``test_interpolation.py`` (one pytest
process each), and writes the pass count and the failures to ``diffrax_conformance.json``, pytest's output to
``diffrax_conformance.log``.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import diffrax

from lpjax._io import atomic_write, atomic_write_json

TARGETS = ("test_integrate.py::test_basic", "test_integrate.py::test_ode_order", "test_detest.py",
           "test_global_interpolation.py", "test_interpolation.py")


def _solvers(stages) -> str:
    return "(" + "".join(f"lpjax.diffrax.GaussLegendre({s}), " for s in stages) + ")"


def _substitute(test_dir: pathlib.Path, stages) -> None:
    helpers = test_dir / "helpers.py"
    text = helpers.read_text()
    text, n1 = re.subn(r"^all_ode_solvers = \(.*?^\)$", f"all_ode_solvers = {_solvers(stages)}", text,
                       flags=re.M | re.S)
    text, n2 = re.subn(r"^all_split_solvers = \(.*?^\)$", "all_split_solvers = ()", text, flags=re.M | re.S)
    helpers.write_text("import lpjax.diffrax\n" + text)
    integrate = test_dir / "test_integrate.py"
    text = integrate.read_text()
    text, n3 = re.subn(r'(@pytest\.mark\.parametrize\(\n    "solver",\n)    \(\n.*?\n    \),\n\)\n(?=@pytest\.mark\.parametrize\("t_dtype")',
                       lambda m: m.group(1) + f"    {_solvers(stages)},\n)\n", text, flags=re.S)
    integrate.write_text("import lpjax.diffrax\n" + text)
    if (n1, n2, n3) != (1, 1, 1):
        raise SystemExit(f"the test folder is not laid out as diffrax v0.7.2's (substitutions {n1, n2, n3}); "
                         f"check it out at the installed diffrax's tag, v{diffrax.__version__}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=pathlib.Path, help="a diffrax source checkout (with test/)")
    p.add_argument("--stages", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).parent / "results")
    args, pytest_args = p.parse_known_args(argv)  # the rest goes to pytest (e.g. -x, -k EXPR)
    if not (args.source / "test" / "helpers.py").is_file():
        raise SystemExit(f"{args.source} has no test/helpers.py: expected a diffrax source checkout")
    counts, failures, summaries, out, rc = {}, [], [], "", 0
    with tempfile.TemporaryDirectory() as tmp:
        test_dir = pathlib.Path(tmp) / "test"
        shutil.copytree(args.source / "test", test_dir)
        _substitute(test_dir, args.stages)
        for target in TARGETS:  # a process each: one process for all of them crashed inside an XLA
            # compile after ~14 min (its compiled programs' memory mappings reach vm.max_map_count)
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-rfE",
                   f"test/{target}", *pytest_args]
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            print(f"{target}:", proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", flush=True)
            out += f"===== {target}\n{proc.stdout}{proc.stderr}"
            rc = rc or proc.returncode
            summaries.append(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else f"{target}: no output")
            for v, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped)", summaries[-1]):
                counts[k] = counts.get(k, 0) + int(v)
            failures += re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, flags=re.M)
            if proc.returncode not in (0, 1):  # 1: tests failed; anything else: the run itself did not finish
                failures.append(f"{target}: pytest exited with {proc.returncode}")
    result = {"diffrax": diffrax.__version__, "stages": args.stages, "targets": list(TARGETS),
              "counts": counts, "failures": failures, "summary": summaries}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(str(args.out / "diffrax_conformance.json"), result)
    atomic_write(str(args.out / "diffrax_conformance.log"),
                 lambda tmp: pathlib.Path(tmp).write_text(out))
    return rc


if __name__ == "__main__":
    sys.exit(main())
