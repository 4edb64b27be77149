"""The call surface of a TensorRT Python module (real bindings or the test double), as data.

pybind11 classes carry their signatures in their docstrings ("name(self: T, a: int,
b: int = 0) -> bool", numbered when overloaded); a Python double carries them in
its functions. Both become the same JSON-able form here, so that a test can hold
the double to the real bindings:

    {"classes": {class: {member: {"kind": "method", "overloads": [[[param, has_default], ...], ...]}
                                 | {"kind": "property", "settable": bool} | {"kind": "value"}}},
     "enums": {enum: {member: value}}, "functions": {name: overloads},
     "callbacks": {method TensorRT calls on an IOutputAllocator subclass: [param, ...]}}

Real TensorRT wheels (tensorrt-cu12-bindings on PyPI) import without TensorRT's
libraries when stand-ins for the few C entry points they link against are on
the library path: ``wheel_surface`` builds those stand-ins (they are never
called: only signatures are read) and reads the surface in a subprocess.

    python -m tests.harness.binding_surface MODULE   # prints MODULE's surface as JSON
"""
from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

CLASSES = ("Runtime", "ICudaEngine", "IExecutionContext", "ILogger", "Logger", "IOutputAllocator", "Dims")
ENUMS = ("DataType", "TensorIOMode", "ExecutionContextAllocationStrategy", "ILogger.Severity")
FUNCTIONS = ("init_libnvinfer_plugins",)
DUNDERS = ("__init__", "__len__", "__getitem__", "__eq__")
NOT_CONSTRUCTED = ("ICudaEngine", "IExecutionContext")  # made by TensorRT only: their __init__ is not an API
Overloads = list[list[list[Any]]]


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in [*parts, current] if p.strip()]


def docstring_overloads(name: str, doc: str | None) -> Overloads:
    """The parameters (name, has a default) of each signature pybind11 wrote into `doc`."""
    overloads = []
    for line in (doc or "").splitlines():
        match = re.match(rf"^\s*(?:\d+\. )?{re.escape(name)}\((.*)\)\s*(?:->.*)?$", line)
        if not match:
            continue
        params = [param for param in _split_top_level(match.group(1)) if not param.startswith("self")]
        if any(param.startswith("*") for param in params):
            continue  # "name(*args, **kwargs)": the header of numbered overloads
        overloads.append([[param.split(":")[0].split("=")[0].strip(), "=" in param] for param in params])
    return overloads


def _python_overloads(function: Any) -> Overloads:
    parameters = list(inspect.signature(function).parameters.values())
    return [[[p.name, p.default is not inspect.Parameter.empty] for p in parameters
             if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]]


def _overloads(owner_name: str, member: Any) -> Overloads:
    try:
        return _python_overloads(member)
    except (ValueError, TypeError):  # a pybind11 function: no Python signature, a docstring
        return docstring_overloads(owner_name, getattr(member, "__doc__", None))


def _member(cls: type, name: str) -> dict[str, Any]:
    static = inspect.getattr_static(cls, name)
    if isinstance(static, property):
        return {"kind": "property", "settable": static.fset is not None}
    if isinstance(static, type):
        return {"kind": "class"}
    if callable(static) or isinstance(static, (staticmethod, classmethod)):
        return {"kind": "method", "overloads": _overloads(name, getattr(cls, name))}
    return {"kind": "value"}


def _declared(cls: type) -> list[str]:
    """Public members, and the dunders a double may define, that `cls` itself defines or
    inherits from its module's classes (not from object)."""
    names = set()
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == "pybind11_builtins":
            continue
        names |= {n for n in vars(klass) if not n.startswith("_") or n in DUNDERS}
    return sorted(names)


def _resolve(module: ModuleType, dotted: str) -> Any:
    value: Any = module
    for part in dotted.split("."):
        value = getattr(value, part, None)
    return value


def surface(module: ModuleType) -> dict[str, Any]:
    classes = {name: {m: _member(cls, m) for m in _declared(cls)
                      if not (m == "__init__" and name in NOT_CONSTRUCTED)}
               for name in CLASSES if (cls := getattr(module, name, None)) is not None}
    enums = {name: {m: int(v) for m, v in enum.__members__.items()}
             for name in ENUMS if (enum := _resolve(module, name)) is not None}
    functions = {name: _overloads(name, function)
                 for name in FUNCTIONS if (function := getattr(module, name, None)) is not None}
    return {"version": getattr(module, "__version__", ""), "classes": classes, "enums": enums,
            "functions": functions, "callbacks": callbacks(getattr(module, "IOutputAllocator", None))}


def callbacks(interface: type | None) -> dict[str, list[str]]:
    """The methods TensorRT calls by name on an application's subclass of `interface`, as
    its docstring's example shows them ("def notify_shape(self, tensor_name, shape):")."""
    found = re.findall(r"def (\w+)\(self, ([^)]*)\)", getattr(interface, "__doc__", None) or "")
    return {name: [p.strip() for p in params.split(",")] for name, params in found if name != "__init__"}


# ---- real TensorRT wheels --------------------------------------------------------------------

def _linked(library: Path) -> tuple[list[str], list[str]]:
    """(the TensorRT libraries `library` needs, the C symbols it takes from them)."""
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = [n for n in re.findall(r"\[(lib[^\]]+)\]", dynamic) if n.startswith("libnv")]
    symbols = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout
    wanted = [line.split()[-1] for line in symbols.splitlines()
              if line.split()[0] == "U" and "@" not in line and not line.split()[-1].startswith(("Py", "_Py"))
              and line.split()[-1] not in ("dlopen", "dlsym", "dlclose", "dlerror")]
    return needed, wanted


def unpack_wheel(wheel: Path, into: Path) -> tuple[Path, Path, str]:
    """Unpack a TensorRT bindings wheel with stand-in libraries; (PYTHONPATH, LD_LIBRARY_PATH, package)."""
    site, libs = into / "site", into / "libs"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    (extension,) = site.glob("*/tensorrt*.so")
    needed, symbols = _linked(extension)
    libs.mkdir(parents=True, exist_ok=True)
    source = libs / "stand_ins.c"
    source.write_text("/* Never called: they let the bindings import to read their signatures. */\n"
                      + "".join(f"void* {name}(void) {{ return 0; }}\n" for name in symbols))
    for library in needed:
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(libs / library), f"-Wl,-soname,{library}",
                        str(source)], check=True, capture_output=True)
    return site, libs, extension.parent.name


def wheel_surface(wheel: Path, into: Path) -> dict[str, Any]:
    site, libs, package = unpack_wheel(wheel, into)
    return installed_surface(package, site, {"LD_LIBRARY_PATH": str(libs)})


def installed_surface(package: str, site: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The surface of `package` imported from `site` (a pip --target folder, kept off this
    process's path: trtpool would take a TensorRT module found there for an install)."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-m", "tests.harness.binding_surface", package],
                            env={"PYTHONPATH": f"{site}:{root}", "PATH": "/usr/bin:/bin", **(env or {})},
                            capture_output=True, text=True, timeout=300, cwd=root)
    if result.returncode:
        raise RuntimeError(f"reading {package} from {site}: {result.stderr[-2000:]}")
    return json.loads(result.stdout)


if __name__ == "__main__":
    import importlib

    print(json.dumps(surface(importlib.import_module(sys.argv[1]))))
