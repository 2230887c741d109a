"""The operator policy of a scope (SPEC §1.4, §5 retention, §10, §12): one typed model, read by
the gateway (visibility, confirmation), storage (authorization, retention), the admission worker
(rules, attester keys) and search (language, redaction allowlist).

| member | meaning (default) |
|---|---|
| ``enabled`` | memory on for the scope (``false``: memory is off by default) |
| ``tools`` | tools granted to every caller of the scope (``[]``) |
| ``grants`` | per principal or agent: ``{subject: principal|agent, id, tools}`` replacing ``tools`` for that caller; an agent's grant wins over its principal's (``[]``) |
| ``confirmation_required`` | capture / request_admission needing a confirmation (``[]``) |
| ``retention_cap_ms`` | longest ``expires_at - now`` accepted, ms (``null``: no cap) |
| ``retain_allowed`` | whether ``derivative_rule: retain`` is permitted (``false``) |
| ``reconciliation_families`` | family refs consented for reconciliation (``[]``) |
| ``redaction_allowlist`` | top-level record fields that leave (``null``: the default list) |
| ``admission`` | ``{mode, require_trust, below_trust, adjudicate_types}`` (auto-accept, ``asserted``, ``reject``, ``[]``) |
| ``attester_keys`` | ``{key_id, public_key, trust}`` Ed25519 keys whose attestations make a candidate ``signed`` (an attester) or ``earned`` (the host's evidence verifier); ``trust`` defaults to ``signed`` (``[]``) |
| ``language`` | the search analyzer's language, ``en`` / ``de`` / ``none`` (``en``) |
| ``reveal_pending`` | whether an operator may reveal a held candidate's plaintext (each reveal journaled) (``false``) |
| ``version`` | incremented by storage on every change (compare-and-set) |

Every document is validated on write (:meth:`ScopePolicy.changed`): an unknown member, a wrong
type, an unknown tool, a duplicate, an attester key that is not a raw Ed25519 key — all
INVALID_SCHEMA, nothing stored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from engram_core.errors import Code, EngramError
from engram_core.host_context import ClaimError, check_text
from engram_core.jws import public_key_from_b64url
from engram_core.languages import DEFAULT_SEARCH_LANGUAGE
from engram_core.redaction import DEFAULT_ALLOWLIST
from engram_core.schemas.tools import TOOL_NAMES

# The journal operation of a policy change (object id ``policy``): not a record's transition.
POLICY_CHANGE = "policy_change"
# An operator read a held candidate's plaintext (object id the candidate; its state unchanged).
REVEAL = "reveal"
# An operator dropped the scope's search projection on every replica (object id ``projection``):
# each rebuilds it from the journal on its next search.
PROJECTION_REBUILD = "projection_rebuild"
PROJECTION_OBJECT_ID = "projection"
# Journal operations that move no record: the search projection skips them.
UNPROJECTED_OPERATIONS = frozenset({POLICY_CHANGE, REVEAL, PROJECTION_REBUILD})
CONFIRMABLE = ("engram_memory_capture", "engram_memory_request_admission")
# Trust classes in ascending order of what stands behind them (SPEC §10).
TRUST_CLASSES = ("asserted", "signed", "earned")
# The fields a record has (SPEC §9: the redaction allowlist names top-level record fields).
RECORD_FIELDS = (*DEFAULT_ALLOWLIST, "retention", "reconciliation", "purpose_ref")
MAX_LIST = 256
# The longest retention cap an operator can set: ten years.
MAX_RETENTION_CAP_MS = 10 * 366 * 24 * 3600 * 1000


def _ref(value: str) -> str:
    try:
        return check_text(value, "ref")
    except ClaimError:
        raise ValueError("not an opaque ref") from None


def _unique(values: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(set(values)) != len(values):
        raise ValueError("duplicate")
    return values


def _ed25519(value: str) -> str:
    public_key_from_b64url(value)  # ValueError when it is not a raw 32-byte key
    return value


Ref = Annotated[str, AfterValidator(_ref)]
ToolName = Literal[TOOL_NAMES]  # type: ignore[valid-type]
Tools = Annotated[tuple[ToolName, ...], AfterValidator(_unique)]


class _Member(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ToolGrant(_Member):
    subject: Literal["principal", "agent"]
    id: Ref
    tools: Tools


class AdmissionRules(_Member):
    mode: Literal["auto_accept", "require_adjudication", "reject_all"] = "auto_accept"
    # The least trust class a candidate needs to be admitted without an operator.
    require_trust: Literal[TRUST_CLASSES] = "asserted"  # type: ignore[valid-type]
    # What happens to a candidate below it: rejected, or held for adjudication.
    below_trust: Literal["reject", "adjudicate"] = "reject"
    # ``primary_event.type_ref`` values always held for an operator.
    adjudicate_types: Annotated[tuple[Ref, ...], Field(max_length=MAX_LIST), AfterValidator(_unique)] = ()


class AttesterKey(_Member):
    key_id: Ref
    public_key: Annotated[str, AfterValidator(_ed25519)]
    # The class an attestation under this key earns (engram_core/attestation.py).
    trust: Literal["signed", "earned"] = "signed"


class ScopePolicy(_Member):
    enabled: bool = False
    tools: Tools = ()
    grants: Annotated[tuple[ToolGrant, ...], Field(max_length=MAX_LIST)] = ()
    confirmation_required: Annotated[tuple[Literal[CONFIRMABLE], ...], AfterValidator(_unique)] = ()  # type: ignore[valid-type]
    retention_cap_ms: Annotated[int, Field(gt=0, le=MAX_RETENTION_CAP_MS)] | None = None
    retain_allowed: bool = False
    reconciliation_families: Annotated[tuple[Ref, ...], Field(max_length=MAX_LIST), AfterValidator(_unique)] = ()
    redaction_allowlist: Annotated[tuple[Literal[RECORD_FIELDS], ...], AfterValidator(_unique)] | None = None  # type: ignore[valid-type]
    admission: AdmissionRules = AdmissionRules()
    attester_keys: Annotated[tuple[AttesterKey, ...], Field(max_length=64)] = ()
    language: Literal["en", "de", "none"] = DEFAULT_SEARCH_LANGUAGE
    reveal_pending: bool = False
    version: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _distinct(self) -> "ScopePolicy":
        subjects = [(g.subject, g.id) for g in self.grants]
        if len(set(subjects)) != len(subjects):
            raise ValueError("duplicate grant")
        key_ids = [k.key_id for k in self.attester_keys]
        if len(set(key_ids)) != len(key_ids):
            raise ValueError("duplicate attester key")
        return self

    # -- reading ------------------------------------------------------------------------------

    @classmethod
    def from_stored(cls, doc: dict[str, Any] | None) -> "ScopePolicy":
        """The policy as stored (absent: the default). Stored documents were validated on write;
        one that no longer validates (a bug, a hand edit) fails closed as POLICY_UNAVAILABLE."""
        try:
            return cls.model_validate_json(json.dumps(doc or {}))
        except ValidationError:
            raise EngramError(Code.POLICY_UNAVAILABLE) from None

    @classmethod
    def from_json(cls, data: bytes | str) -> "ScopePolicy":
        try:
            return cls.model_validate_json(data or b"{}")
        except ValidationError:
            raise EngramError(Code.POLICY_UNAVAILABLE) from None

    def wire(self) -> dict[str, Any]:
        """The JSON document (stored, sent, journaled by digest)."""
        return self.model_dump(mode="json")

    def tools_for(self, principal: str, agent_id: str) -> frozenset[str]:
        """The tools granted to this caller: the agent's grant, else its principal's, else the
        scope's; nothing while memory is off."""
        if not self.enabled:
            return frozenset()
        by_subject = {(g.subject, g.id): g.tools for g in self.grants}
        tools = by_subject.get(("agent", agent_id), by_subject.get(("principal", principal), self.tools))
        return frozenset(tools)

    # -- writing ------------------------------------------------------------------------------

    def changed(self, changes: dict[str, Any]) -> "ScopePolicy":
        """A new policy with ``changes`` (top-level members) applied and its version bumped;
        INVALID_SCHEMA when the result does not validate (nothing is partially applied)."""
        if not isinstance(changes, dict) or "version" in changes:
            raise EngramError(Code.INVALID_SCHEMA)
        try:
            # Validated as JSON, strictly: changes arrive as JSON, and a stored document is read
            # the same way (arrays for the tuple members, no coercion of "true" or "5").
            return type(self).model_validate_json(json.dumps({**self.wire(), **changes, "version": self.version + 1}))
        except (ValidationError, ValueError, TypeError):
            raise EngramError(Code.INVALID_SCHEMA) from None


def changed_members(before: ScopePolicy, after: ScopePolicy) -> list[str]:
    """The members an edit changed (sorted; ``version`` left out)."""
    old, new = before.wire(), after.wire()
    return sorted(name for name in new if name != "version" and old.get(name) != new.get(name))
