"""The type stubs (python/weft/**/*.pyi) against the extensions they describe, so that an
editor's completions are the API that runs:

    PYTHONPATH=build/release/python /usr/bin/python3 tests/python/check_stubs.py python/weft

Every name a stub declares exists in its module (classes with every method and attribute
the stub gives them), every public name of the module is declared, and every function's
parameters, as pybind11 reports them, are the stub's, in order (overloaded functions, whose
signatures pybind11 lists several, are checked by name only; module-level annotated names are
not checked). Exits 1 listing what differs.
"""
import ast
import importlib
import importlib.util
import pathlib
import sys

# Which stub describes which module; weft._torch only where the torch backend was built.
STUBS = {"weft._weft": "_weft/__init__.pyi", "weft._weft.dist": "_weft/dist.pyi",
         "weft._torch": "_torch.pyi"}
# What pybind11 gives every enum class besides its values.
ENUM_EXTRAS = {"name", "value"}


def split_top_level(text):
    """Splits `text` at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def runtime_parameters(function):
    """Parameter names from pybind11's signature line, or None (overloaded, not pybind11)."""
    doc = getattr(function, "__doc__", None) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    name = getattr(function, "__name__", "")
    if "Overloaded function" in doc or not first.startswith(name + "("):
        return None
    inside = first[len(name) + 1:first.rindex(") ->")] if ") ->" in first else ""
    names = [p.split(":")[0].split("=")[0].strip() for p in split_top_level(inside)]
    return [n for n in names if n not in ("self", "*", "/")]


def stub_parameters(node):
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return [n for n in names if n != "self"]


def check_function(where, node, function, problems):
    runtime = runtime_parameters(function)
    if runtime is not None and runtime != stub_parameters(node):
        problems.append(f"{where}: parameters {stub_parameters(node)} in the stub, "
                        f"{runtime} in the module")


def declared_members(class_node):
    members = {}
    for node in class_node.body:
        if isinstance(node, ast.FunctionDef):
            members[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members[node.target.id] = None
    return members


def check_class(where, node, cls, problems):
    members = declared_members(node)
    for name, function_node in members.items():
        if name.startswith("__") and name != "__init__":
            continue
        if not hasattr(cls, name):
            problems.append(f"{where}.{name}: in the stub, not in the module")
        elif function_node is not None and callable(getattr(cls, name)):
            check_function(f"{where}.{name}", function_node, getattr(cls, name), problems)
    extras = ENUM_EXTRAS if hasattr(cls, "__members__") else set()
    for name in vars(cls):
        if not name.startswith("_") and name not in members and name not in extras:
            problems.append(f"{where}.{name}: in the module, not in the stub")


def check_module(module_name, stub_path, problems):
    module = importlib.import_module(module_name)
    tree = ast.parse(pathlib.Path(stub_path).read_text(), stub_path)
    declared = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            declared.add(node.name)
            where = f"{module_name}.{node.name}"
            if not hasattr(module, node.name):
                problems.append(f"{where}: in the stub, not in the module")
            elif isinstance(node, ast.ClassDef):
                check_class(where, node, getattr(module, node.name), problems)
            else:
                check_function(where, node, getattr(module, node.name), problems)
        elif isinstance(node, ast.ImportFrom):
            declared.update(a.asname or a.name for a in node.names)
    for name, value in vars(module).items():
        public = not name.startswith("_") and not isinstance(value, type(sys))
        if public and name not in declared:
            problems.append(f"{module_name}.{name}: in the module, not in the stub")


def main():
    package = pathlib.Path(sys.argv[1])
    problems = []
    checked = []
    for module_name, stub in STUBS.items():
        if module_name == "weft._torch" and importlib.util.find_spec(module_name) is None:
            continue  # built without the torch backend
        check_module(module_name, package / stub, problems)
        checked.append(module_name)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("stubs match " + ", ".join(checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
