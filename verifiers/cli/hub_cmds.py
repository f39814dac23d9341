"""``vf login / logout / whoami / push / install / uninstall / pull / search / info / visibility / yank / unyank / star``.

Signatures only at import (``vf --help`` stays fast); the hub client loads when a command runs. Every
failure a user can cause is a :class:`HubClientError`, shown as one line (plus a hint) and exit 1.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from verifiers.cli.errors import UserError, guarded

F = TypeVar("F", bound=Callable[..., Any])
PANEL = "Environments Hub"

HubOpt = Annotated[str | None, typer.Option("--hub", help="Hub URL (default: VF_HUB_URL or your vf login).")]


def _hub_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from verifiers.hub_client.api import HubClientError

        try:
            return func(*args, **kwargs)
        except HubClientError as exc:
            raise UserError(exc.message, hint=exc.hint) from None
        except ValueError as exc:  # a malformed URL or id
            raise UserError(str(exc)) from None

    return wrapper  # type: ignore[return-value]


def _client(hub: str | None = None, token: str | None = None):  # type: ignore[no-untyped-def]
    from verifiers.hub_client.api import HubClient
    from verifiers.hub_client.config import resolve

    return HubClient(resolve(hub, token))


def _text(text: str, style: str = ""):  # type: ignore[no-untyped-def]
    """Hub-supplied text shown verbatim: never read as rich markup, control characters escaped."""
    from rich.text import Text as _Text

    from verifiers.cli.render import printable

    return _Text(printable(text), style=style)


def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(stderr=False, highlight=False, soft_wrap=True)


def _ref(text: str, client: Any = None, *, need_version: bool = False):  # type: ignore[no-untyped-def]
    from verifiers.hub_client.api import HubClientError, parse_ref
    from verifiers.ids import parse_env_id

    default_owner = None
    if client is not None and parse_env_id(text).owner is None:
        try:
            default_owner = client.whoami()["name"]
        except HubClientError:
            default_owner = None
    ref = parse_ref(text, default_owner=default_owner)
    if need_version and not ref.version:
        raise HubClientError(f"{text!r} names no version: expected owner/name@VERSION")
    return ref


def register(app: typer.Typer) -> None:
    """Add the hub commands to the ``vf`` app."""

    @app.command("login", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def login(
        hub: HubOpt = None,
        token: Annotated[
            str | None, typer.Option("--token", help="The token (default: read from stdin or a prompt).")
        ] = None,
    ) -> None:
        """Store a hub token in your user config (owner-only permissions) after checking it."""
        from verifiers.hub_client import config

        if token is None:
            if sys.stdin.isatty():
                token = typer.prompt("Hub token", hide_input=True)
            else:
                token = sys.stdin.readline().strip()
        if not token:
            raise UserError("no token given", hint="vf login --token TOKEN (or pipe it on stdin)")
        with _client(hub, token) as c:
            me = c.whoami()
        path = config.save(c.config.url, token)
        typer.echo(f"logged in to {c.config.url} as {me['name']} (token saved in {path})")

    @app.command("logout", rich_help_panel=PANEL)
    @guarded
    def logout() -> None:
        """Forget the stored hub token."""
        from verifiers.hub_client import config

        typer.echo("logged out" if config.forget() else "not logged in")

    @app.command("whoami", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def whoami(hub: HubOpt = None) -> None:
        """Show who the hub thinks you are."""
        with _client(hub) as c:
            if not c.config.token:
                raise UserError(f"not logged in to {c.config.url}", hint="vf login")
            me = c.whoami()
        orgs = ", ".join(f"{o['name']} ({o['role']})" for o in me.get("orgs", [])) or "none"
        typer.echo(f"{me['name']} on {c.config.url} (token scope: {me.get('scope')}; orgs: {orgs})")

    @app.command("push", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def push_cmd(
        path: Annotated[Path, typer.Argument(help="The environment package folder.")] = Path("."),
        owner: Annotated[str | None, typer.Option("--owner", help="Publish under this org.")] = None,
        private: Annotated[
            bool | None, typer.Option("--private/--public", help="Visibility of a new environment.")
        ] = None,
        bump: Annotated[
            str | None, typer.Option("--bump", help="patch | minor | major | rc | post before pushing.")
        ] = None,
        hub: HubOpt = None,
        no_import_check: Annotated[
            bool, typer.Option(
                "--no-import-check", help="Skip importing the module (and so the conformance check) before the build."
            )
        ] = False,
        no_check: Annotated[
            bool, typer.Option("--no-check", help="Skip the conformance check (vf check) before the build.")
        ] = False,
        wait: Annotated[
            bool, typer.Option("--wait", help="Wait for the hub's sandboxed check; exit 1 if it failed.")
        ] = False,
        wait_timeout: Annotated[float, typer.Option("--wait-timeout", help="Seconds --wait waits.")] = 900.0,
    ) -> None:
        """Validate, check (vf check), build (wheel + sdist) and publish an environment package."""
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

        from verifiers.hub_client.push import push

        console = _console()
        with _client(hub) as c:
            if not c.config.token:
                raise UserError(f"pushing needs a token for {c.config.url}", hint="vf login")
            with Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=console,
                transient=True,
            ) as prog:
                task = prog.add_task("uploading", total=None)
                outcome = push(
                    c,
                    path,
                    owner=owner,
                    private=private,
                    bump=bump,
                    check_import=not no_import_check,
                    check=not (no_check or no_import_check),
                    progress=lambda done, total: prog.update(task, completed=done, total=total),
                    log=lambda m: console.print(m),
                )
        ref = outcome.ref
        if outcome.status == "unchanged":
            console.print(f"{ref} is already on the hub with identical content: nothing to do")
        else:
            console.print(f"published {ref} ({outcome.build.wheel.name}, {outcome.build.sdist.name})")
        console.print(f"page:    {outcome.page_url}")
        console.print(f"install: {outcome.install}")
        _report_check(console, hub, outcome.ref, wait=wait, timeout=wait_timeout)

    @app.command("install", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def install_cmd(
        envs: Annotated[list[str] | None, typer.Argument(help="owner/name[@version] ...")] = None,
        lock: Annotated[
            Path | None, typer.Option("--lock", help="Read (no envs given) or update a lock file of hashes.")
        ] = None,
        installer: Annotated[str, typer.Option("--installer", help="pip or uv.")] = "pip",
        hub: HubOpt = None,
        allow_unverified: Annotated[
            bool,
            typer.Option("--allow-unverified", help="Install versions whose hub check failed (VF_ALLOW_UNVERIFIED=1)."),
        ] = False,
    ) -> None:
        """Install hub environments into this Python environment, pinned by version and sha256."""
        from verifiers.hub_client.install import install

        if not envs and not lock:
            raise UserError("name at least one environment (owner/name[@version]) or --lock FILE")
        console = _console()
        with _client(hub) as c:
            refs = [_ref(e) for e in envs or []]
            # The verification gate runs inside install(), for every release it installs.
            done = install(c, refs, lock=lock, installer=installer, log=lambda m: console.print(m),
                           allow_unverified=allow_unverified)
        import importlib

        from verifiers.errors import EnvironmentNotFoundError
        from verifiers.utils import env_loading

        importlib.invalidate_caches()  # pip just wrote new packages and metadata
        for r in done:
            console.print(f"installed {r.id}=={r.version} ({r.distribution}, sha256 {r.sha256[:12]}...)")
            try:  # what vf.load_environment / vf eval will find under this id
                found = env_loading.locate(r.id)
                if found.kind == "module":  # no entry point: a classic factory or a v1 package
                    module = found.target.split(":")[0]
                    console.print(f"  vf.load_environment({r.id!r}) loads the module {module} "
                                  "(its load_environment, or the v1 Taskset in its __all__)")
                else:
                    console.print(f"  vf.load_environment({r.id!r}) loads {found.target}")
            except (EnvironmentNotFoundError, ValueError) as exc:
                console.print(f"  warning: the loader cannot find it: {exc}")
        if lock:
            console.print(f"lock: {lock}")

    @app.command("uninstall", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def uninstall_cmd(
        envs: Annotated[list[str], typer.Argument(help="owner/name or distribution names.")],
        installer: Annotated[str, typer.Option("--installer", help="pip or uv.")] = "pip",
    ) -> None:
        """Uninstall environments installed with vf install."""
        from verifiers.hub_client.install import uninstall

        for d in uninstall(envs, installer=installer):
            typer.echo(f"uninstalled {d}")

    @app.command("pull", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def pull_cmd(
        env: Annotated[str, typer.Argument(help="owner/name[@version]")],
        dest: Annotated[Path | None, typer.Argument(help="Folder (default ./NAME-VERSION).")] = None,
        hub: HubOpt = None,
    ) -> None:
        """Download an environment's source and extract it safely."""
        from verifiers.hub_client.pull import pull

        with _client(hub) as c:
            folder, version, files = pull(c, _ref(env), dest)
        typer.echo(f"pulled {_ref(env).id}@{version} into {folder} ({len(files)} files)")

    @app.command("search", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def search_cmd(
        text: Annotated[str, typer.Argument(help="Words to look for.")] = "",
        tag: Annotated[
            list[str] | None, typer.Option("--tag", help="Only with this tag (repeatable).")
        ] = None,
        owner: Annotated[str | None, typer.Option("--owner", help="Only this owner's.")] = None,
        sort: Annotated[str, typer.Option("--sort", help="downloads | stars | updated | name")] = "downloads",
        limit: Annotated[int, typer.Option("--limit", "-n", help="How many to show.")] = 20,
        as_json: Annotated[bool, typer.Option("--json", help="Print the hub's answer as JSON.")] = False,
        hub: HubOpt = None,
    ) -> None:
        """Search the hub's environments (whole ids, tab-separated when not on a wide terminal)."""
        import json

        from verifiers.cli.render import listing

        if sort not in ("downloads", "stars", "updated", "name"):
            raise UserError(f"unknown sort {sort!r}: downloads, stars, updated or name")
        with _client(hub) as c:
            res = c.search(text, tags=tag, owner=owner, sort=sort, per_page=max(1, min(limit, 100)))
        if as_json:
            typer.echo(json.dumps(res, indent=2))
            return
        rows = [
            [
                e["id"],
                "private" if e.get("private") else "public",
                e.get("latest_version") or "-",
                str(e["downloads"]),
                str(e["stars"]),
                ", ".join(e.get("tags", [])),
                (e.get("description") or "")[:200],
            ]
            for e in res["items"]
        ]
        listing(_console(), ["environment", "visibility", "latest", "downloads", "stars", "tags", "description"],
                rows, title=f"{res['total']} environment(s)")

    @app.command("info", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def info_cmd(
        env: Annotated[str, typer.Argument(help="owner/name[@version]")],
        as_json: Annotated[bool, typer.Option("--json", help="Print everything shown as one JSON object.")] = False,
        hub: HubOpt = None,
    ) -> None:
        """Versions (yanked marked), downloads, install commands and the latest eval results."""
        import json

        from verifiers.cli.render import listing, printable
        from verifiers.hub_client.advice import install_advice

        console = _console()
        with _client(hub) as c:
            ref = _ref(env)
            detail = c.environment(ref)
            versions = c.versions(ref)
            evals = c.evals(ref)
            shown = ref.version if ref.version and ref.version != "latest" else detail.get("latest_version")
            # The hub writes the install commands (the same as on its env page); for one version when
            # there is one to show, else for the environment's name alone.
            advice = install_advice(c.version(ref, shown) if shown else detail)
        if as_json:
            typer.echo(json.dumps({"environment": detail, "versions": versions, "evals": evals,
                                   "install": advice.as_dict()}, indent=2))
            return
        console.print(_text(detail["id"] + (" (private)" if detail.get("private") else ""), style="bold"))
        if detail.get("description"):
            console.print(_text(detail["description"]))
        console.print(_text(
            f"latest: {detail.get('latest_version') or '-'}   downloads: {detail['downloads']} "
            f"(last 30 days: {detail.get('downloads_last_30_days', 0)})   stars: {detail['stars']}"
        ))
        if detail.get("tags"):
            console.print(_text("tags: " + ", ".join(detail["tags"])))
        # Commands are written as plain text (no markup, no wrapping) so they can be copied whole.
        lines = [f"install: {advice.vf}", f"uv:      {advice.uv}"]
        lines += [f"{'pip:' if i == 0 else '':<9}{line}" for i, line in enumerate(advice.pip)]
        if advice.note:
            lines.append(f"         ({advice.note})")
        console.file.write("".join(printable(line) + "\n" for line in lines))
        console.file.flush()
        from verifiers.hub_client.verified import describe

        rows = []
        for v in versions:
            yanked = ("yes" + (f": {v['yank_reason']}" if v.get("yank_reason") else "")) if v["yanked"] else ""
            rows.append([v["version"], v["created_at"][:19], ", ".join(f["kind"] for f in v["files"]), yanked,
                         describe(v.get("check"))])
        listing(console, ["version", "uploaded", "files", "yanked", "check"], rows, title="versions")
        if evals:
            rows = [[ev["model"], ev["version"], f"{ev['avg_reward']:.4f}", str(ev["num_rollouts"]),
                     ev["created_at"][:19]] for ev in evals[:10]]
            listing(console, ["model", "version", "avg reward", "rollouts", "submitted"], rows,
                    title="latest eval results", whole=(0, 1))
        else:
            console.print("no eval results yet")

    @app.command("visibility", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def visibility_cmd(
        env: Annotated[str, typer.Argument(help="owner/name")],
        visibility: Annotated[str, typer.Argument(help="public or private")],
        hub: HubOpt = None,
    ) -> None:
        """Make an environment public or private (its owner only; all its versions go with it)."""
        if visibility not in ("public", "private"):
            raise UserError(f"visibility must be public or private, not {visibility!r}")
        with _client(hub) as c:
            ref = _ref(env)
            if ref.version:
                raise UserError(f"visibility belongs to the environment, not one version: vf visibility {ref.id} {visibility}")
            out = c.set_visibility(ref, private=visibility == "private")
        typer.echo(f"{ref.id} is now {'private' if out.get('private') else 'public'}")

    @app.command("yank", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def yank_cmd(
        env: Annotated[str, typer.Argument(help="owner/name@version")],
        reason: Annotated[str, typer.Option("--reason", help="Why (shown to installers).")] = "",
        hub: HubOpt = None,
    ) -> None:
        """Yank a version: kept and installable when pinned, never chosen as latest."""
        with _client(hub) as c:
            ref = _ref(env, need_version=True)
            c.yank(ref, reason)
        typer.echo(f"yanked {ref}" + (f" ({reason})" if reason else ""))

    @app.command("unyank", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def unyank_cmd(
        env: Annotated[str, typer.Argument(help="owner/name@version")], hub: HubOpt = None
    ) -> None:
        """Undo a yank."""
        with _client(hub) as c:
            ref = _ref(env, need_version=True)
            c.unyank(ref)
        typer.echo(f"unyanked {ref}")

    @app.command("star", rich_help_panel=PANEL)
    @guarded
    @_hub_errors
    def star_cmd(
        env: Annotated[str, typer.Argument(help="owner/name")],
        remove: Annotated[bool, typer.Option("--remove", help="Remove your star.")] = False,
        hub: HubOpt = None,
    ) -> None:
        """Star an environment (or --remove the star)."""
        with _client(hub) as c:
            ref = _ref(env)
            c.environment(ref)
            c.star(ref, on=not remove)
        typer.echo(f"{'unstarred' if remove else 'starred'} {ref.id}")


def _report_check(console: Any, hub: str | None, ref: Any, *, wait: bool, timeout: float) -> None:
    """After a push: the version's check status; with ``wait``, its verdict (exit 1 when failed)."""
    from verifiers.hub_client.verified import describe, wait_for_verdict

    with _client(hub) as c:
        if not wait:
            check = c.version(ref, ref.version).get("check")
            console.print(f"check:   {describe(check)} (vf push --wait waits for the verdict)")
            return
        check = wait_for_verdict(c, ref, ref.version, timeout=timeout, log=lambda m: console.print(m))
    console.print(f"check:   {describe(check)}")
    if check is not None and check.get("status") == "failed":
        if check.get("log_tail"):
            console.print(check["log_tail"][-2000:], markup=False, highlight=False)
        raise typer.Exit(1)
