"""Eval results: posting one on a version, deleting one.

Moved here from ``hub.api.evals`` (the writes of ``post_eval`` and ``delete_eval``); the router keeps
checking the request's shape (numbers, sizes, depth), the service the rules (who may act on the
environment, how many results one user keeps, who may delete).
"""

from __future__ import annotations

from sqlalchemy import func, select

from hub.auth import Principal
from hub.errors import Forbidden, NotFound
from hub.models import Environment, EvalResult
from hub.queries import resolve_version
from hub.services.uow import UnitOfWork
from hub.settings import Settings


class EvalService:
    def __init__(self, settings: Settings, uow: UnitOfWork) -> None:
        self.settings = settings
        self.uow = uow

    def post_eval(
        self, principal: Principal, env: Environment, version: str, ev: EvalResult
    ) -> tuple[EvalResult, str]:
        """Attach ``ev`` (its fields filled but its environment, version and submitter) to ``version``
        of ``env``; the stored row and the version's spelling."""
        if not principal.within_restrictions(env.owner_id, env.id):
            raise Forbidden("this token is limited to another owner or environment")
        with self.uow.write(cached=False) as s:  # no cached page shows eval results
            ver = resolve_version(s, env, version)
            mine = s.scalar(
                select(func.count())
                .select_from(EvalResult)
                .where(EvalResult.env_id == env.id, EvalResult.submitter_id == principal.user_id)
            )
            if (mine or 0) >= self.settings.max_evals_per_user:
                raise Forbidden(
                    f"you keep {mine} eval results on this environment, the most one user may; delete old ones "
                    "(DELETE .../evals/{id}) to post more",
                )
            ev.env_id, ev.version_id, ev.submitter_id = env.id, ver.id, principal.user_id
            s.add(ev)
            s.flush()
            return ev, ver.version

    def delete_eval(self, principal: Principal, env: Environment, eval_id: int) -> None:
        """The submitter, or the environment's owner and maintainers (write access), remove a result."""
        if not principal.within_restrictions(env.owner_id, env.id):
            raise Forbidden("this token is limited to another owner or environment")
        with self.uow.write(cached=False) as s:
            ev = s.scalar(select(EvalResult).where(EvalResult.id == eval_id, EvalResult.env_id == env.id))
            if ev is None:
                raise NotFound("eval result not found")
            if ev.submitter_id != principal.user_id and not principal.can_write(env.owner_id, env.id):
                raise Forbidden("only the submitter or the environment's maintainers may delete this")
            s.delete(ev)
