"""Packaging beyond setup.cfg: the user tools are installed as ``catmap_tools``, never as a
top-level ``tools`` package (that name belongs to every project with a ``tools/`` folder), and
the benchmark and fuzzing scripts of ``tools/`` stay in the repository (``python -m tools.X``
from a clone)."""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

#: The modules of tools/ that the console scripts need; everything else there is a dev script.
USER_TOOLS = {
    "__init__", "_bench_common", "analyze_dataset", "benchmark_loader", "browse_dataset",
    "cache", "dataset_source", "demo", "demo_resume", "demo_stats", "draw", "shapes_dataset",
    "shapes_render", "shards",
}


class BuildPyUserToolsOnly(build_py):
    """build_py that installs only the user tools of ``catmap_tools``."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        if package != "catmap_tools":
            return modules
        return [module for module in modules if module[1] in USER_TOOLS]


setup(
    packages=find_packages(include=["catalog", "catalog.*", "mappers", "mappers.*",
                                    "samplers", "samplers.*"]) + ["catmap_tools"],
    package_dir={"catmap_tools": "tools"},
    cmdclass={"build_py": BuildPyUserToolsOnly},
)
