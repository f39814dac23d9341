"""Request and response models of the JSON API (every route declares its response model)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class FileOut(BaseModel):
    filename: str
    kind: str
    sha256: str
    size: int
    upload_time: str
    url: str
    requires_python: str | None = None
    core_metadata_sha256: str | None = None


class EnvSummary(BaseModel):
    id: str = Field(description="owner/name")
    owner: str
    name: str
    display_name: str
    description: str
    tags: list[str]
    private: bool
    latest_version: str | None
    downloads: int
    stars: int
    created_at: str
    updated_at: str


class SearchOut(BaseModel):
    total: int
    page: int
    per_page: int
    items: list[EnvSummary]


class InstallCommands(BaseModel):
    """The one set of install commands (hub/queries.py ``install_commands``); none mixes indexes."""

    vf: str = Field(description="vf install owner/name@VERSION (pinned by sha256)")
    uv: str = Field(description="uv add with the owner's hub index as a named index")
    pip: list[str] = Field(description="pip commands, run in order: public dependencies, then the hub alone")
    note: str | None = Field(default=None, description="What a private environment needs (VF_HUB_TOKEN)")
    needs_access: bool = Field(
        default=False,
        description="It depends on a private environment of its owner that the caller cannot read: an install "
        "needs a token that can read it (such a name never comes from a public index)",
    )
    needs_access_extras: list[str] = Field(
        default_factory=list,
        description="The extras of this version under which one of its requirements is such a private "
        "environment: an install that asks for one of them needs that access too",
    )


class EnvDetail(EnvSummary):
    versions: list[str]
    starred: bool
    downloads_last_30_days: int
    install: str = Field(description="The pip commands of install_commands joined with ' && '")
    install_commands: InstallCommands
    distribution: str = Field(description="The Python distribution name pip installs")


class VersionOut(BaseModel):
    version: str
    yanked: bool
    yank_reason: str | None
    prerelease: bool
    created_at: str
    summary: str
    files: list[FileOut]
    check: dict[str, Any] | None = Field(
        default=None,
        description="The newest sandboxed check: status queued|running|passed|failed|error, reason, times",
    )


class VersionDetail(VersionOut):
    license: str | None
    requires_python: str | None
    dependencies: list[str]
    environments: list[str] = Field(
        default_factory=list,
        description="The environments it loads by id ([tool.verifiers] environments): the same owner's, from this hub only",
    )
    tags: list[str]
    eval_defaults: dict[str, Any]
    content_hash: str | None
    metadata: dict[str, Any]
    has_readme: bool
    install_commands: InstallCommands = Field(description="The commands that install this version")


class PublishOut(BaseModel):
    owner: str
    name: str
    version: str
    created_version: bool
    files: list[dict[str, Any]]


class CreateEnvIn(BaseModel):
    owner: str = Field(max_length=64)
    name: str = Field(max_length=128)
    private: bool = False


class PatchEnvIn(BaseModel):
    private: bool | None = None


class YankIn(BaseModel):
    reason: str = Field(default="", max_length=2000)


class EvalIn(BaseModel):
    metadata: dict[str, Any] = Field(
        description="The run's metadata.json (model, avg_reward, sampling_args, ...)"
    )
    summary: dict[str, Any] = Field(default_factory=dict, description="Any summary (per-metric means, notes)")


class TokenIn(BaseModel):
    name: str = Field(default="", max_length=100)
    scope: Literal["read", "write"] = "write"
    owner: str | None = Field(default=None, max_length=64, description="Limit the token to one owner")
    environment: str | None = Field(default=None, max_length=200, description="Limit to one 'owner/name'")
    expires_in_days: float | None = Field(default=None, gt=0, le=3650)


class UserIn(BaseModel):
    name: str = Field(max_length=64)
    admin: bool = False


class OrgIn(BaseModel):
    name: str = Field(max_length=64)
    description: str = Field(default="", max_length=2000)


class MemberIn(BaseModel):
    role: Literal["admin", "write", "read"] = "read"


# ------------------------------------------------------------------------------------ responses
class Out(BaseModel):
    """A response body: a key the handler returns but the model does not declare is an error (500 in
    the tests), never silently dropped."""

    model_config = ConfigDict(extra="forbid")


class ReadmeOut(Out):
    version: str
    content_type: str | None
    source: str
    html: str = Field(description="Sanitised HTML")


class StarOut(Out):
    starred: bool
    stars: int


class DailyCount(Out):
    day: str
    count: int


class DownloadsOut(Out):
    total: int
    last_30_days: int
    daily: list[DailyCount]


class SourceFile(Out):
    path: str
    size: int


class SourceListOut(Out):
    version: str
    sdist: str
    files: list[SourceFile]


class EvalOut(Out):
    id: int
    version: str
    model: str
    avg_reward: float
    num_rollouts: int
    num_examples: int | None
    rollouts_per_example: int | None
    num_errors: int | None = None  # rollouts with a recorded error (None: not reported)
    num_infra_errors: int | None = None  # of which infrastructure failures, not in avg_reward
    sampling_args: dict[str, Any]
    metadata: dict[str, Any]
    summary: dict[str, Any]
    submitter: str | None
    created_at: str


class LeaderboardRow(Out):
    model: str
    avg_reward: float
    version: str
    version_yanked: bool
    num_rollouts: int
    num_examples: int | None
    rollouts_per_example: int | None
    num_errors: int | None = None  # rollouts with a recorded error (None: not reported)
    num_infra_errors: int | None = None  # of which infrastructure failures, not in avg_reward
    sampling_args: dict[str, Any]
    submitter: str | None
    eval_id: int
    created_at: str
    rank: int


class OrgRole(Out):
    name: str
    role: str


class WhoamiOut(Out):
    name: str
    admin: bool
    scope: str
    orgs: list[OrgRole]


class UserCreatedOut(Out):
    name: str
    admin: bool
    token: str = Field(description="The user's first token (shown once)")


class OwnerOut(Out):
    name: str
    display_name: str | None
    kind: str
    description: str | None
    created_at: str | None
    environments: list[EnvSummary]


class Member(Out):
    user: str
    role: str


class OrgOut(Out):
    name: str
    kind: Literal["org"] = "org"
    description: str | None = None
    members: list[Member] | None = Field(default=None, description="Shown to the organisation's members only")


class MembershipOut(Out):
    org: str
    user: str
    role: str | None = None
    removed: bool | None = None


class TokenOut(Out):
    id: int
    name: str | None
    prefix: str
    scope: str
    owner: str | None
    environment: str | None
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None
    created_at: str | None


class TokenCreatedOut(TokenOut):
    token: str = Field(description="The secret (shown once)")
