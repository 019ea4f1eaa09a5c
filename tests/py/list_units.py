"""What ctest registers for the Python tests, every script in one interpreter.

    list_units.py SCRIPT.py...   prints `SCRIPT<TAB>Class` for each unit of each script
                                 (common.ctest_units: one test class each), or
                                 `SCRIPT<TAB>` with the reason on stderr when a script
                                 cannot be imported

tests/CMakeLists.txt runs it once at configure time. Running each `SCRIPT.py --list`
instead paid an interpreter and the script's imports (PyTorch: about 10 s on a loaded
machine) per script, close to two minutes for 29 scripts, twice per CI run. The scripts
are imported as modules (their main() runs only as __main__), so what is listed is what
`SCRIPT.py --list` prints."""
import importlib.util
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def units(path):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return common.ctest_units(module)


def main():
    for path in sys.argv[1:]:
        script = Path(path).stem
        try:
            names = units(path)
        except Exception:  # reported; the script then gets one test that shows why
            print(f"{script}: cannot list: {traceback.format_exc(limit=2)}", file=sys.stderr)
            names = []
        print("\n".join(f"{script}\t{name}" for name in names) if names else f"{script}\t")


if __name__ == "__main__":
    main()
