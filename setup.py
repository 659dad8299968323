"""Build hook: ship grammars/sqlpp.lark inside the idivm.sqlpp package as sqlpp.lark.

All other packaging configuration is in pyproject.toml.  Editable installs read
the grammar from grammars/ in the source tree instead.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

GRAMMAR = Path(__file__).parent / "grammars" / "sqlpp.lark"


class BuildPyWithGrammar(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if not GRAMMAR.is_file():
            raise SystemExit(f"missing {GRAMMAR}: the SQL++ grammar must be present to build idivm")
        target = Path(self.build_lib, "idivm", "sqlpp", "sqlpp.lark")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GRAMMAR, target)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return [*outputs, str(Path(self.build_lib, "idivm", "sqlpp", "sqlpp.lark"))]


setup(cmdclass={"build_py": BuildPyWithGrammar})
