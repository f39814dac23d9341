"""Build small, real environment packages (wheel + sdist) for hub tests and the hub benchmark.

The packages are built by hatchling's own builders, in-process and offline, so they are exactly what
``python -m build`` would produce for the same project (a real RECORD, METADATA, PKG-INFO), without
the seconds an isolated build environment costs per package.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def normalize(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def module_name(name: str) -> str:
    return re.sub(r"[-.]+", "_", name).lower()


@dataclass(frozen=True)
class BuiltPackage:
    """A built environment package: its project folder and the two archives."""

    name: str
    version: str
    project: Path
    wheel: Path
    sdist: Path

    @property
    def normalized(self) -> str:
        return normalize(self.name)


def write_env_project(
    root: Path,
    name: str,
    version: str,
    *,
    description: str | None = None,
    readme: str | None = None,
    dependencies: list[str] | None = None,
    tags: list[str] | None = None,
    requires_python: str = ">=3.10",
    license: str = "Apache-2.0",
    eval_defaults: dict[str, object] | None = None,
    payload_bytes: bytes | None = None,
) -> Path:
    """Write an environment project (pyproject, README, a module with ``load_environment``).

    ``payload_bytes`` adds a data file of that content to the package (used to make large uploads).
    Returns the project folder.
    """
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid distribution name {name!r}")
    mod = module_name(name)
    project = root / f"{normalize(name)}-{version}"
    pkg = project / mod
    pkg.mkdir(parents=True, exist_ok=False)
    description = description if description is not None else f"The {name} environment."
    readme = readme if readme is not None else f"# {name}\n\n{description}\n"
    deps = dependencies or []
    tags = tags or []
    eval_defaults = eval_defaults or {"num_examples": 5, "rollouts_per_example": 2}
    (project / "README.md").write_text(readme, encoding="utf-8")
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            f'''\
            """{description}"""

            VERSION = {version!r}


            def load_environment(**kwargs):
                """Return a description of the environment (these test packages need no SDK)."""
                return {{"name": {name!r}, "version": VERSION, "args": kwargs}}
            '''
        ),
        encoding="utf-8",
    )
    if payload_bytes is not None:
        (pkg / "payload.bin").write_bytes(payload_bytes)
    eval_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in eval_defaults.items())
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = {name}
            version = {version}
            description = {description}
            readme = "README.md"
            requires-python = {requires_python}
            license = {{ text = {license} }}
            keywords = {tags}
            dependencies = {deps}

            [tool.verifiers]
            tags = {tags}

            [tool.verifiers.eval]
            {eval_lines}

            [tool.hatch.build.targets.wheel]
            packages = [{mod}]

            [tool.hatch.build.targets.sdist]
            include = [{mod}, "README.md", "pyproject.toml"]
            """
        ).format(
            name=json.dumps(name),
            version=json.dumps(version),
            description=json.dumps(description),
            requires_python=json.dumps(requires_python),
            license=json.dumps(license),
            tags=json.dumps(tags),
            deps=json.dumps(deps),
            eval_lines=eval_lines,
            mod=json.dumps(mod),
        ),
        encoding="utf-8",
    )
    return project


def build_project(project: Path, out_dir: Path) -> tuple[Path, Path]:
    """Build a wheel and an sdist of ``project`` into ``out_dir`` with hatchling; return both paths."""
    from hatchling.builders.sdist import SdistBuilder
    from hatchling.builders.wheel import WheelBuilder

    out_dir.mkdir(parents=True, exist_ok=True)
    wheels = list(WheelBuilder(str(project)).build(directory=str(out_dir), versions=["standard"]))
    sdists = list(SdistBuilder(str(project)).build(directory=str(out_dir), versions=["standard"]))
    if len(wheels) != 1 or len(sdists) != 1:
        raise RuntimeError(f"hatchling built {wheels} and {sdists} for {project}")
    return Path(wheels[0]), Path(sdists[0])


def build_env_package(work_dir: Path, name: str, version: str = "0.1.0", **project_args: object) -> BuiltPackage:
    """Write and build one environment package under ``work_dir`` (archives land in ``work_dir/dist``)."""
    project = write_env_project(work_dir / "src", name, version, **project_args)  # type: ignore[arg-type]
    wheel, sdist = build_project(project, work_dir / "dist")
    return BuiltPackage(name=name, version=version, project=project, wheel=wheel, sdist=sdist)
