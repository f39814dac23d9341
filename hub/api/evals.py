"""Evaluation results and leaderboards."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from sqlalchemy import func, select

from hub.api.deps import EnvDep, HubDep, SessionDep, WriterDep, WriterEnvDep
from hub.api.schemas import (
    EvalIn,
    EvalOut,
    LeaderboardRow,
)
from hub.errors import HubError
from hub.models import (
    EvalResult,
    Owner,
    Version,
)
from hub.queries import (
    eval_out,
    leaderboard,
    resolve_version,
)
from verifiers.utils.json_limits import json_depth

router = APIRouter()


def _number(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise HubError(422, f"metadata.{field} must be a finite number")
    return float(v)


def _opt_int(v: Any, field: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 2**31:
        raise HubError(422, f"metadata.{field} must be a non-negative integer")
    return v


@router.post(
    "/environments/{owner}/{name}/versions/{version}/evals", response_model=EvalOut, status_code=201, tags=["evals"]
)
def post_eval(
    request: Request, hub: HubDep, principal: WriterDep, target: WriterEnvDep, version: str, body: EvalIn
) -> dict[str, Any]:
    """Attach an evaluation run (its ``metadata.json`` and a summary) to a version. Needs a write token
    of anyone who can see the environment; the submitter is recorded."""
    md = body.metadata
    model = md.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        raise HubError(422, "metadata.model must be a non-empty string")
    avg = _number(md.get("avg_reward"), "avg_reward")
    n_ex = _opt_int(md.get("num_examples"), "num_examples")
    rpe = _opt_int(md.get("rollouts_per_example"), "rollouts_per_example")
    n_roll = _opt_int(md.get("num_rollouts"), "num_rollouts")
    if n_roll is None:
        n_roll = (n_ex or 0) * (rpe or 1)
    n_err = _opt_int(md.get("num_errors"), "num_errors")
    n_infra = _opt_int(md.get("num_infra_errors"), "num_infra_errors")
    if n_err is not None and n_err > n_roll:
        raise HubError(422, "metadata.num_errors cannot exceed metadata.num_rollouts")
    if n_infra is not None and n_infra > (n_err if n_err is not None else n_roll):
        raise HubError(422, "metadata.num_infra_errors cannot exceed metadata.num_errors")
    sampling = md.get("sampling_args") or {}
    if not isinstance(sampling, dict):
        raise HubError(422, "metadata.sampling_args must be an object")
    limit = hub.settings.max_json_depth
    if json_depth(md, limit) > limit or json_depth(body.summary, limit) > limit:
        raise HubError(422, f"eval metadata and summary may nest at most {limit} levels")
    raw_md = json.dumps(md, default=str)
    raw_summary = json.dumps(body.summary, default=str)
    if len(raw_md) + len(raw_summary) > hub.settings.max_eval_bytes:
        raise HubError(413, f"eval metadata and summary must be under {hub.settings.max_eval_bytes} bytes")
    ev, ver = hub.evals.post_eval(
        principal,
        target.env,
        version,
        EvalResult(
            model=model.strip(),
            avg_reward=avg,
            num_rollouts=n_roll,
            num_examples=n_ex,
            rollouts_per_example=rpe,
            num_errors=n_err,
            num_infra_errors=n_infra,
            sampling_args=json.dumps(sampling, default=str),
            metadata_json=raw_md,
            summary_json=raw_summary,
        ),
    )
    return eval_out(ev, ver, principal.user_name)


@router.get("/environments/{owner}/{name}/evals", response_model=list[EvalOut], tags=["evals"])
def list_evals(
    request: Request, s: SessionDep, target: EnvDep,
    response: Response,
    version: Annotated[str | None, Query(max_length=64)] = None,
    page: Annotated[int, Query(ge=1, le=100000)] = 1,
    per_page: Annotated[int, Query(ge=1, le=100)] = 50,
) -> list[dict[str, Any]]:
    """Newest first, one page at a time (``X-Total-Count`` and a ``Link: rel="next"`` header)."""
    env = target.env
    where = [EvalResult.env_id == env.id]
    if version:
        where.append(EvalResult.version_id == resolve_version(s, env, version).id)
    total = int(s.scalar(select(func.count()).select_from(EvalResult).where(*where)) or 0)
    stmt = (
        select(EvalResult, Version.version, Owner.name)
        .join(Version, Version.id == EvalResult.version_id)
        .outerjoin(Owner, Owner.id == EvalResult.submitter_id)
        .where(*where)
        .order_by(EvalResult.id.desc())
        .limit(per_page)
        .offset((page - 1) * per_page)
    )
    out = [eval_out(r[0], r[1], r[2]) for r in s.execute(stmt).all()]
    response.headers["X-Total-Count"] = str(total)
    if page * per_page < total:
        nxt = request.url.include_query_params(page=page + 1, per_page=per_page)
        response.headers["Link"] = f'<{nxt}>; rel="next"'
    return out


@router.delete("/environments/{owner}/{name}/evals/{eval_id}", status_code=204, tags=["evals"])
def delete_eval(
    request: Request, hub: HubDep, principal: WriterDep, target: WriterEnvDep,
    eval_id: Annotated[int, Path(ge=1, le=2**31 - 1)],
) -> Response:
    """The submitter, or the environment's owner and maintainers (write access), may remove a result."""
    hub.evals.delete_eval(principal, target.env, eval_id)
    return Response(status_code=204)


@router.get("/environments/{owner}/{name}/leaderboard", response_model=list[LeaderboardRow], tags=["evals"])
def get_leaderboard(s: SessionDep, target: EnvDep) -> list[dict[str, Any]]:
    """Best average reward per model, with the version, sampling settings and number of rollouts."""
    return leaderboard(s, target.env)
