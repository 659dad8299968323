"""Build hook: ship the grammars of grammars/ inside the packages that read them
(grammars/sqlpp.lark as idivm/sqlpp/sqlpp.lark, grammars/idiff.lark as idivm/diffs/idiff.lark,
grammars/schema.lark as idivm/schema.lark).

All other packaging configuration is in pyproject.toml.  Editable installs read
the grammars from grammars/ in the source tree instead.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

GRAMMARS = Path(__file__).parent / "grammars"
#: each grammar file and the package directory it is shipped in
SHIPPED = {"sqlpp.lark": ("idivm", "sqlpp"), "idiff.lark": ("idivm", "diffs"), "schema.lark": ("idivm",)}


class BuildPyWithGrammar(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name, package in SHIPPED.items():
            grammar = GRAMMARS / name
            if not grammar.is_file():
                raise SystemExit(f"missing {grammar}: the grammars must be present to build idivm")
            target = Path(self.build_lib, *package, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(grammar, target)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return [*outputs, *(str(Path(self.build_lib, *package, name)) for name, package in SHIPPED.items())]


setup(cmdclass={"build_py": BuildPyWithGrammar})
