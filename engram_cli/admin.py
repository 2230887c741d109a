"""``engram admin``: the operator CLI over the AdminService (SPEC §12).

The storage address, the operator credential and the operator's certificate directory come
from ENGRAM_STORAGE_ADDR / ENGRAM_ADMIN_TOKEN / ENGRAM_TLS_DIR (``ENGRAM_GRPC_PLAINTEXT=true``
against a development plaintext plane), or from the state directory of a running ``engram up``
(``--state-dir``, default ``.engram``). The AdminService wants both: the bearer token and the
operator identity. On a local stack, ``enable`` also allows the dev host to act for the tenant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import grpc

from engram_api.admin.v1 import admin_pb2, admin_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_core.languages import SEARCH_LANGUAGES
from engram_core.policy import CONFIRMABLE
from engram_core.schemas.tools import TOOL_NAMES
from engram_cli.stackstate import StackState
from storage_service.operator import MAX_WAIT_SECONDS, OPERATOR_MOVES
from engram_core.settings import BaseEngramSettings
from engram_core.transport import Transport, TransportError


CALL_SECONDS = 10.0


async def _call(transport: Transport, addr: str, token: str, method: str, request: object,
                timeout: float = CALL_SECONDS) -> Any:
    async with transport.channel(addr, "storage") as chan:
        stub = admin_pb2_grpc.AdminServiceStub(chan)
        return await getattr(stub, method)(request, metadata=(("authorization", f"Bearer {token}"),), timeout=timeout)


async def enable_scope(
    transport: Transport, addr: str, token: str, tenant: str, workspace: str, tools: list[str], confirm: list[str],
    language: str = "",
) -> admin_pb2.ScopeState:
    request = admin_pb2.EnableScopeRequest(
        scope=common_pb2.Scope(tenant=tenant, workspace=workspace), tools=tools, confirmation_required=confirm,
        language=language,
    )
    return await _call(transport, addr, token, "EnableScope", request)


def _target(opts: argparse.Namespace) -> tuple[Transport, str, str, StackState | None]:
    state = StackState.load(Path(opts.state_dir)) if (Path(opts.state_dir) / "stack.json").exists() else None
    addr = os.environ.get("ENGRAM_STORAGE_ADDR") or (state.storage_addr if state else None)
    token = os.environ.get("ENGRAM_ADMIN_TOKEN") or (state.admin_token() if state else None)
    if not addr or not token:
        raise SystemExit("engram admin: set ENGRAM_STORAGE_ADDR and ENGRAM_ADMIN_TOKEN, or run it beside `engram up`")
    settings = BaseEngramSettings()
    if settings.tls_dir is None and not settings.grpc_plaintext and state is not None:
        return state.transport("operator"), addr, token, state
    try:
        return Transport.from_settings(settings), addr, token, state
    except TransportError as exc:
        raise SystemExit(f"engram admin: {exc}") from None


def _scope(opts: argparse.Namespace) -> common_pb2.Scope:
    return common_pb2.Scope(tenant=opts.tenant, workspace=opts.workspace)


def _answer(transport: Transport, addr: str, token: str, method: str, request: object,
            field: str = "value_json", timeout: float = CALL_SECONDS) -> Any:
    """One admin call's JSON answer (its ``field``); None when it was refused (reported)."""
    reply = _run(transport, addr, token, method, request, timeout)
    return None if reply is None else json.loads(getattr(reply, field))


def _run(transport: Transport, addr: str, token: str, method: str, request: object,
         timeout: float = CALL_SECONDS) -> Any:
    """One admin call; None (the contract code printed on stderr) when it was refused."""
    try:
        return asyncio.run(_call(transport, addr, token, method, request, timeout))
    except grpc.aio.AioRpcError as exc:
        print(refusal_line(_code(exc)), file=sys.stderr)
        return None


# Moves after which the record's content is gone or unusable for good: asked before running.
DESTRUCTIVE = frozenset({"expire", "tombstone", "trust_invalidate"})


def _transition(transport: Transport, addr: str, token: str, opts: argparse.Namespace) -> int:
    if opts.op in DESTRUCTIVE:
        refused = _confirmed(opts, f"{opts.op} record {opts.record} in {opts.tenant}/{opts.workspace}")
        if refused is not None:
            return refused
    request = admin_pb2.TransitionRecordRequest(
        scope=_scope(opts), record_id=opts.record,
        operation=opts.op, to_state=opts.to or "", related_record_id=opts.related or "", reason_ref=opts.reason)
    answer = _answer(transport, addr, token, "TransitionRecord", request)
    if answer is None:
        return 1
    if opts.json:
        print(json.dumps(answer, indent=2))
        return 0
    print(f"{'record':<60} {'operation':<17} {'from':<17} {'to':<17} cursor")
    for receipt in (answer["receipt"], *([answer["related"]] if "related" in answer else [])):
        print(f"{receipt['record_id']:<60} {receipt['operation']:<17} {receipt['from_state']:<17} "
              f"{receipt['to_state']:<17} {receipt['cursor']}")
    return 0


def _confirmed(opts: argparse.Namespace, what: str) -> int | None:
    """None when the operator confirmed ``what`` (or passed --yes); else the exit code."""
    if opts.yes:
        return None
    if not sys.stdin.isatty():
        print(f"engram admin: {what} is destructive; pass --yes to run it without a prompt", file=sys.stderr)
        return 2
    if input(f"{what}? [y/N] ").strip().lower() not in ("y", "yes"):
        print("engram admin: not done", file=sys.stderr)
        return 1
    return None


def _pending(transport: Transport, addr: str, token: str, opts: argparse.Namespace) -> int:
    request = admin_pb2.ListPendingRequest(scope=_scope(opts),
                                           limit=opts.limit, after_candidate_id=opts.after or "")
    found = _answer(transport, addr, token, "ListPending", request, "candidates_json")
    if found is None:
        return 1
    if opts.json:
        print(json.dumps(found, indent=2))
        return 0
    print(f"{'candidate':<62} {'reason':<18} {'cursor':<8} captured_at")
    for item in found:
        print(f"{item['candidate_id']:<62} {item['reason']:<18} {item['captured_cursor']:<8} {item['captured_at']}")
    return 0


def _adjudicate(transport: Transport, addr: str, token: str, opts: argparse.Namespace) -> int:
    if opts.decision == "reject":
        refused = _confirmed(opts, f"reject candidate {opts.candidate} in {opts.tenant}/{opts.workspace}")
        if refused is not None:
            return refused
    request = admin_pb2.AdjudicateRequest(scope=_scope(opts),
                                          candidate_id=opts.candidate, decision=opts.decision, reason_ref=opts.reason)
    outcome = _answer(transport, addr, token, "Adjudicate", request, "outcome_json")
    if outcome is None:
        return 1
    if opts.json:
        print(json.dumps(outcome, indent=2))
    else:
        print(f"{outcome['candidate_id']} {outcome['status']} {outcome.get('record_id', '')}".rstrip())
    return 0


def _reveal(transport: Transport, addr: str, token: str, opts: argparse.Namespace) -> int:
    refused = _confirmed(opts, f"reveal the plaintext of candidate {opts.candidate} in {opts.tenant}/{opts.workspace} "
                               "(the reveal is journaled)")
    if refused is not None:
        return refused
    request = admin_pb2.RevealCandidateRequest(scope=_scope(opts), candidate_id=opts.candidate, reason_ref=opts.reason)
    revealed = _answer(transport, addr, token, "RevealCandidate", request)
    if revealed is None:
        return 1
    if opts.json:
        print(json.dumps(revealed, indent=2))
        return 0
    print(f"candidate {revealed['candidate_id']} revealed (journal cursor {revealed['cursor']})")
    for component in revealed["payload"]["components"]:
        print(f"[{component['component_id']} {component['kind']}] {component['text']}")
    return 0


# Exit code of rebuild-projection when the rebuild is recorded but not every search replica
# acknowledged it within --wait (the worker goes on until every one has).
REBUILD_PENDING = 5


def _rebuild(transport: Transport, addr: str, token: str, opts: argparse.Namespace) -> int:
    if not 0 <= opts.wait <= MAX_WAIT_SECONDS:  # storage's own bound, checked before asking
        print(f"engram admin: --wait is 0..{MAX_WAIT_SECONDS:g} seconds", file=sys.stderr)
        return 2
    refused = _confirmed(opts, f"rebuild the search projection of {opts.tenant}/{opts.workspace} on every replica "
                               "(its searches wait for the rebuild)")
    if refused is not None:
        return refused
    request = admin_pb2.RebuildProjectionRequest(scope=_scope(opts), reason_ref=opts.reason, wait_seconds=opts.wait)
    answer = _answer(transport, addr, token, "RebuildProjection", request, timeout=opts.wait + CALL_SECONDS)
    if answer is None:
        return 1
    complete = answer["projection_invalidation"] == "complete"
    if opts.json:
        print(json.dumps(answer, indent=2))
    elif complete:
        print(f"projection dropped on {len(answer['replicas'])} replicas ({', '.join(answer['replicas'])}) "
              f"at journal cursor {answer['receipt']['cursor']}; each rebuilds on its next search")
    else:
        print(f"rebuild recorded at journal cursor {answer['receipt']['cursor']}; not every replica acknowledged "
              f"within {opts.wait:g} s (the worker keeps trying; `engram admin history --object projection`)")
    return 0 if complete else REBUILD_PENDING


# Exit code of verify-journal when the chain does not verify.
JOURNAL_BROKEN = 3


def _history(transport: Transport, addr: str, token: str, opts: argparse.Namespace) -> int:
    scope = _scope(opts)
    if opts.command == "history":
        answer = _answer(transport, addr, token, "ObjectHistory",
                         admin_pb2.ObjectHistoryRequest(scope=scope, object_id=opts.object))
    else:
        answer = _answer(transport, addr, token, "VerifyJournal", admin_pb2.VerifyJournalRequest(scope=scope))
    if answer is None:
        return 1
    if opts.json:
        print(json.dumps(answer, indent=2))
    elif opts.command == "history":
        print(f"{answer['object_id']} is {answer['state']}")
        print(f"{'cursor':<8} {'at':<25} {'operation':<17} {'from':<18} {'to':<18} actor")
        for e in answer["events"]:
            print(f"{e['cursor']:<8} {e['at']:<25} {e['operation']:<17} {e['from_state'] or '-':<18} "
                  f"{e['to_state']:<18} {e['actor']}")
    elif answer["ok"]:
        print(f"journal intact: {answer['events']} events, head {answer['head']}")
    else:
        print(f"journal broken at cursor {answer['first_bad_cursor']} ({answer['problem']}); "
              f"{answer['events']} events verified before it, head {answer['head']}")
    if opts.command == "verify-journal" and not answer["ok"]:
        return JOURNAL_BROKEN
    return 0


SCOPE_HELP = {
    "enable": "turn memory on for a scope and grant tools",
    "disable": "turn memory off for a scope (every tool disappears on the next call)",
    "show": "the scope's policy, every member",
    "policy": "change members of the scope's policy (validated, versioned, journaled)",
}
# Exit code when the policy moved on since the version an edit was based on.
POLICY_STALE_EXIT = 4


def _changes(opts: argparse.Namespace) -> dict[str, Any] | None:
    """The members ``engram admin policy`` replaces; None (reported) when they do not parse."""
    changes: dict[str, Any] = {}
    try:
        if opts.file is not None:
            text = sys.stdin.read() if str(opts.file) == "-" else opts.file.read_text("utf-8")
            loaded = json.loads(text)
            if not isinstance(loaded, dict):
                raise ValueError("not an object")
            changes.update(loaded)
        for item in opts.set:
            member, sep, value = item.partition("=")
            if not sep or not member:
                raise ValueError(item)
            changes[member] = json.loads(value)
    except (OSError, ValueError) as exc:
        print(f"engram admin: policy changes must be MEMBER=JSON or a JSON object ({exc})", file=sys.stderr)
        return None
    if not changes:
        print("engram admin: nothing to change: give --set MEMBER=JSON or --file", file=sys.stderr)
        return None
    return changes


def _scope_request(opts: argparse.Namespace) -> tuple[str, object] | None:
    scope = _scope(opts)
    if opts.command == "show":
        return "GetScope", admin_pb2.GetScopeRequest(scope=scope)
    edit: dict[str, Any] = {"actor_ref": opts.actor or ""}
    if opts.expect_version is not None:
        edit["expected_version"] = opts.expect_version
    if opts.command == "enable":
        return "EnableScope", admin_pb2.EnableScopeRequest(scope=scope, tools=opts.tools, confirmation_required=opts.confirm,
                                                           language=opts.language, **edit)
    if opts.command == "disable":
        return "DisableScope", admin_pb2.DisableScopeRequest(scope=scope, **edit)
    changes = _changes(opts)
    if changes is None:
        return None
    return "UpdatePolicy", admin_pb2.UpdatePolicyRequest(scope=scope, changes_json=json.dumps(changes).encode(), **edit)


def _scope_command(transport: Transport, addr: str, token: str, opts: argparse.Namespace) -> int:
    """enable / disable / show / policy: the scope's state after the call, as a table or JSON."""
    call = _scope_request(opts)
    if call is None:
        return 2
    try:
        reply = asyncio.run(_call(transport, addr, token, *call))
    except grpc.aio.AioRpcError as exc:
        code = _code(exc)
        print(refusal_line(code), file=sys.stderr)
        return POLICY_STALE_EXIT if code == "POLICY_STALE" else 1
    policy = json.loads(reply.policy_json or b"{}")
    if opts.json:
        print(json.dumps({"enabled": reply.enabled, "version": reply.version, "change_cursor": reply.change_cursor,
                          "changed_members": list(reply.changed_members), "policy": policy}, indent=2))
        return 0
    print(f"scope {opts.tenant}/{opts.workspace}: memory {'on' if reply.enabled else 'off'}, policy version {reply.version}")
    if opts.command != "show":
        changed = ", ".join(reply.changed_members) or "nothing (already so)"
        print(f"changed: {changed}" + (f" (journal cursor {reply.change_cursor})" if reply.change_cursor else ""))
    for member, value in policy.items():
        if member != "version":
            print(f"  {member:<24} {json.dumps(value)}")
    return 0


# What to do about a refused admin call, by code (printed after it; the code stays first on the
# line for scripts).
HINTS = {
    "UNAVAILABLE": "storage is not reachable: is the stack running (`engram up`), and is ENGRAM_STORAGE_ADDR right?",
    "DEADLINE_EXCEEDED": "storage did not answer in time: retry; if it persists, look at storage's log",
    "UNAUTHENTICATED": "the operator credential was refused: check ENGRAM_ADMIN_TOKEN",
    "PERMISSION_DENIED": "this identity may not use the admin plane: use the operator certificate (ENGRAM_TLS_DIR)",
    "UNAUTHORIZED": "the operator credential was refused: check ENGRAM_ADMIN_TOKEN",
    "STORE_UNAVAILABLE": "storage cannot reach its database: check MongoDB, then retry",
    "POLICY_STALE": "the policy changed meanwhile: `engram admin show`, then retry with its --expect-version",
    "INVALID_SCHEMA": "an argument or policy member is not valid: see `--help` and docs/operations.md",
    "NOT_FOUND": "nothing with that id in this scope (check --tenant/--workspace)",
    "ILLEGAL_TRANSITION": "the lifecycle does not allow this move from the current state: `engram admin history`",
    "ALREADY_TERMINAL": "it is already in its terminal state: nothing to do",
    "JOURNAL_CORRUPT": "the scope's journal does not verify: stop and restore from a backup (docs/operations.md)",
}


def refusal_line(code: str) -> str:
    """``engram admin: CODE`` plus what to do about it, when there is something to say."""
    hint = HINTS.get(code)
    return f"engram admin: {code}" + (f" ({hint})" if hint else "")


def _code(exc: grpc.aio.AioRpcError) -> str:
    """The contract code of a failed admin call (the gRPC status name when it carries none)."""
    for key, value in exc.trailing_metadata() or ():
        if key == "engram-error-code":
            return str(value)
    return exc.code().name


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="engram admin", description=__doc__)
    parser.add_argument("--state-dir", default=".engram")
    sub = parser.add_subparsers(dest="command", required=True)
    move = sub.add_parser("transition", help="an operator lifecycle move on a record (SPEC §6)")
    move.add_argument("--tenant", required=True)
    move.add_argument("--workspace", required=True)
    move.add_argument("--record", required=True, help="the record id")
    move.add_argument("--op", required=True, choices=OPERATOR_MOVES)
    move.add_argument("--reason", required=True, help="why: an opaque reference (a ticket id), never content")
    move.add_argument("--to", choices=("accepted_current", "historical"), help="resolve_dispute: the outcome")
    move.add_argument("--related", help="supersede: the current record that supersedes this one; rewind: the "
                      "record to make historical instead of the one the supersession names")
    move.add_argument("--yes", action="store_true", help="run expire, tombstone or trust_invalidate without asking")
    move.add_argument("--json", action="store_true", help="print the receipts as JSON")
    pending = sub.add_parser("pending", help="candidates held for an operator (metadata only, never plaintext)")
    pending.add_argument("--tenant", required=True)
    pending.add_argument("--workspace", required=True)
    pending.add_argument("--limit", type=int, default=100, help="1..1000 (default 100)")
    pending.add_argument("--after", help="page on after this candidate id")
    pending.add_argument("--json", action="store_true")
    adjudicate = sub.add_parser("adjudicate", help="accept or reject a held candidate")
    adjudicate.add_argument("--tenant", required=True)
    adjudicate.add_argument("--workspace", required=True)
    adjudicate.add_argument("--candidate", required=True)
    adjudicate.add_argument("--decision", required=True, choices=("accept", "reject"))
    adjudicate.add_argument("--reason", required=True, help="why: an opaque reference (a ticket id)")
    adjudicate.add_argument("--yes", action="store_true", help="reject without asking")
    adjudicate.add_argument("--json", action="store_true")
    reveal = sub.add_parser("reveal", help="a held candidate's plaintext (needs the scope's reveal_pending; journaled)")
    reveal.add_argument("--tenant", required=True)
    reveal.add_argument("--workspace", required=True)
    reveal.add_argument("--candidate", required=True)
    reveal.add_argument("--reason", required=True, help="why: an opaque reference (a ticket id)")
    reveal.add_argument("--yes", action="store_true", help="reveal without asking")
    reveal.add_argument("--json", action="store_true", help="the whole payload and evidence as JSON")
    history = sub.add_parser("history", help="a record's or candidate's states over time, from the journal")
    history.add_argument("--tenant", required=True)
    history.add_argument("--workspace", required=True)
    history.add_argument("--object", required=True, help="a record id (with its candidate's events) or candidate id")
    history.add_argument("--json", action="store_true")
    check = sub.add_parser("verify-journal", help="walk the scope's hash chain (exit 3 when it does not verify)")
    check.add_argument("--tenant", required=True)
    check.add_argument("--workspace", required=True)
    check.add_argument("--json", action="store_true")
    rebuild = sub.add_parser("rebuild-projection", help="drop the scope's search projection on every replica; "
                             "each rebuilds it from the journal (exit 5 when not all acknowledged in time)")
    rebuild.add_argument("--tenant", required=True)
    rebuild.add_argument("--workspace", required=True)
    rebuild.add_argument("--reason", required=True, help="why: an opaque reference (a ticket id)")
    rebuild.add_argument("--wait", type=float, default=10.0,
                         help="seconds to wait for every replica's acknowledgement, 0..60 (default 10)")
    rebuild.add_argument("--yes", action="store_true", help="rebuild without asking")
    rebuild.add_argument("--json", action="store_true", help="print the receipt and acknowledgements as JSON")
    for name in ("enable", "disable", "show", "policy"):
        cmd = sub.add_parser(name, help=SCOPE_HELP[name])
        cmd.add_argument("--tenant", required=True)
        cmd.add_argument("--workspace", required=True)
        cmd.add_argument("--json", action="store_true", help="print the scope state as JSON")
        if name == "show":
            continue
        cmd.add_argument("--expect-version", type=int, metavar="N",
                         help="apply only while the policy is still version N (else POLICY_STALE, exit 4)")
        cmd.add_argument("--actor", help="who makes the change, an opaque ref for the journal (default: operator)")
        if name == "enable":
            cmd.add_argument("--tools", nargs="+", choices=TOOL_NAMES, default=[], help="granted tools (default: all six)")
            cmd.add_argument("--confirm", nargs="+", default=[], choices=CONFIRMABLE,
                             help="tools that need a human confirmation in this scope")
            cmd.add_argument("--language", choices=SEARCH_LANGUAGES, default="",
                             help="search analyzer language: stop list and stemmer (default: keep; en for a new scope)")
        if name == "policy":
            cmd.add_argument("--set", action="append", default=[], metavar="MEMBER=JSON",
                             help="replace one policy member with a JSON value, e.g. retain_allowed=true or "
                                  'grants=\'[{"subject":"agent","id":"a1","tools":["engram_memory_search"]}]\'')
            cmd.add_argument("--file", type=Path, help="a JSON object of members to replace ('-': stdin)")
    opts = parser.parse_args(argv)
    transport, addr, token, state = _target(opts)
    commands = {"transition": _transition, "pending": _pending, "adjudicate": _adjudicate, "history": _history,
                "verify-journal": _history, "reveal": _reveal, "rebuild-projection": _rebuild, "enable": _scope_command, "disable": _scope_command,
                "show": _scope_command, "policy": _scope_command}
    code = commands[opts.command](transport, addr, token, opts)
    if opts.command == "enable" and code == 0 and state is not None:
        state.allow_dev_host_tenant(opts.tenant)
    return code
