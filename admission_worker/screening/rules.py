"""Our own never-store rules: what the detect-secrets plugins miss or do not know.

detect-secrets (``library.py``) knows the common provider formats. These rules add the host's own
binding tokens (SPEC §10.1), webhook URLs whose path is the secret (Slack, Discord, Teams),
connection strings and URLs with credentials, ``.env`` lines, session cookies, authorization
headers, passwords in prose and config (English and German), and provider formats the library
lacks. Each rule has a constant name that becomes the decision's reason; a rule with a ``v``
group fires only when that value is not a placeholder, a reference or code (``plausible``).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass

_SEP = r"""["']?[ \t]*(?:[:=]|=>|:=)[ \t]*["']?"""
_VALUE = r"""(?P<v>[^\s"'<>,;`]{8,})"""


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    # How strong a captured ``v`` must look: "any" (not a placeholder), "mixed" (also two
    # character classes), "password" (also a letter and a digit or symbol).
    strength: str = "any"
    # Lowercase substrings of which every match contains one: a text holding none of them
    # skips the rule without running its pattern (cheap: ``in`` on the lowered text).
    gate: tuple[str, ...] = ()


def _rule(name: str, regex: str, strength: str = "any", flags: int = 0, gate: tuple[str, ...] = ()) -> Rule:
    return Rule(name, re.compile(regex, flags), strength, gate)


_I = re.IGNORECASE

RULES: tuple[Rule, ...] = (
    _rule("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d+: ?[a-z0-9-]+", gate=("private key", "putty-user-key-file")),
    _rule("aws_access_key", r"\b(?P<v>(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z2-7]{16})\b", gate=("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa", "abia", "acca")),
    _rule("aws_secret_key", r"(?:aws_?secret_?access_?key|SecretAccessKey)" + r"""["']?\s*(?:[:=]\s*|\s+)["']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""", flags=_I, gate=("secret",)),
    _rule("github_token", r"\b(?P<v>gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})\b", gate=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    _rule("gitlab_token", r"\b(?P<v>gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,})", gate=("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-")),
    _rule("slack_token", r"\b(?P<v>xox[abposre]-[A-Za-z0-9-]{10,})", gate=("xox",)),
    _rule("slack_webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/-]{20,})", gate=("hooks.slack.com",)),
    _rule("discord_webhook", r"https://(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks/\d{5,}/(?P<v>[A-Za-z0-9_-]{20,})", gate=("/api/webhooks/",)),
    _rule("discord_bot_token", r"\b(?P<v>[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40})\b", "mixed"),
    _rule("teams_webhook", r"https://[A-Za-z0-9-]+\.webhook\.office\.com/webhookb2/(?P<v>[^\s\"'<>]{40,})|https://outlook\.office(?:365)?\.com/webhook/(?P<w>[^\s\"'<>]{40,})", gate=("webhook.office.com", "outlook.office")),
    _rule("telegram_bot_token", r"\b(?P<v>\d{8,10}:AA[A-Za-z0-9_-]{33})(?![A-Za-z0-9_-])", gate=(":aa",)),
    _rule("stripe_key", r"\b(?P<v>(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9+/=]{24,})", gate=("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_")),
    _rule("ai_api_key", r"(?<![A-Za-z0-9_-])(?P<v>sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{16,200}?T3BlbkFJ[A-Za-z0-9_-]{16,}|sk-ant-[a-z]+\d\d-[A-Za-z0-9_-]{60,}|sk-[A-Za-z0-9]{40,})", gate=("sk-",)),
    _rule("google_api_key", r"\b(?P<v>AIza[A-Za-z0-9_-]{35})(?![A-Za-z0-9_-])", gate=("aiza",)),
    _rule("package_registry_token", r"\b(?P<v>npm_[A-Za-z0-9]{36}|pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{40,})", gate=("npm_", "pypi-")),
    _rule("messaging_api_key", r"\b(?P<v>SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}|SK[0-9a-f]{32}|[0-9a-f]{32}-us\d{1,2})\b", gate=("sg.", "sk", "-us")),
    _rule("commerce_token", r"\b(?P<v>shp(?:at|ss|ca|pa)_[A-Fa-f0-9]{32}|sq0(?:csp|atp)-[A-Za-z0-9_-]{22,}|EAAA[A-Za-z0-9_-]{56,})", gate=("shp", "sq0", "eaaa")),
    _rule("azure_storage_key", r"\bAccountKey=(?P<v>[A-Za-z0-9+/]{40,}={0,2})", gate=("accountkey=",)),
    _rule("azure_sas_token", r"[?&]sv=\d{4}-\d\d-\d\d[^\s\"'<>]{0,300}?[?&]sig=(?P<v>[A-Za-z0-9%+/=]{20,})|[?&]sig=(?P<w>[A-Za-z0-9%+/=]{20,})[^\s\"'<>]{0,300}?[?&]sv=\d{4}", gate=("sig=",)),
    # A compact JWS whose protected header says it is the host's own context or confirmation.
    _rule("host_token", r"\b(?P<h>eyJ[A-Za-z0-9_-]{8,})\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", gate=("eyj",)),
    _rule("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", gate=("eyj",)),
    _rule("connection_string", r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@\"'<>]*:(?P<v>[^\s@/\"'<>]{3,})@[^\s/\"'<>]+", flags=_I, gate=("://",)),
    _rule("password", r"\b(?:password|passwd|passwort|kennwort|pwd)" + _SEP + r"(?P<v>[^\s\"'<>,;`&]{4,})", "password", _I, gate=("pass", "kennwort", "pwd")),
    _rule("password", r"\b(?:password|passphrase|passwort|kennwort|pass\s*code)\b(?:\s+(?:is|was|lautet|ist))?(?:[ \t]*[:=][ \t]*|[ \t]+)[\"']?(?P<v>[^\s\"'<>,;`]{6,})", "password", _I, gate=("pass", "kennwort")),
    _rule("aws_secret_key", r"\bsecret access key\b[^\n]{0,40}?(?<![A-Za-z0-9/+])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])", "mixed", _I, gate=("secret",)),
    _rule("password", r"<(?:password|passwd|pwd)>(?P<v>[^<\s]{4,})</", "password", _I, gate=("<pass", "<pwd")),
    _rule("password", r"(?:^|\s)(?:-p|--password[= ])[\"']?(?P<v>[^\s\"']{6,})", "password", gate=("-p",)),
    _rule("password", r"\b(?:login|credentials?|creds|account)\b[^\n]{0,24}?\b[\w.-]+\s*/\s*(?P<v>\S{8,})", "password", _I, gate=("login", "credential", "creds", "account")),
    _rule("dotenv_secret", r"(?<![A-Za-z0-9_])(?P<k>[A-Z][A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|PWD|API_?KEY|PRIVATE_KEY|ACCESS_KEY|SIGNING_KEY|KEY_BASE|CREDENTIALS?|AUTH)(?:_[A-Z0-9]+)*)=[\"']?" + _VALUE, "mixed", gate=("secret", "token", "passw", "pwd", "api", "key", "credential", "auth")),
    _rule("session_cookie", r"\b(?:set-)?cookie\s*:\s*[^\s=;]+=(?P<v>[^\s;\"']{16,})", "mixed", _I, gate=("cookie",)),
    _rule("session_cookie", r"(?:sess|(?<![A-Za-z])sid)[\w.-]{0,40}=(?P<v>[^\s;\"'&]{16,})", "mixed", _I, gate=("sess", "sid")),
    _rule("auth_header", r"\bauthorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token|bot|digest|apikey)\s+(?P<v>[A-Za-z0-9._~+/=-]{16,})", "mixed", _I, gate=("authorization",)),
    _rule("auth_header", r"\b(?:x-api-key|x-auth-token|x-access-token|api-key|private-token|x-token)[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9._~+/=-]{16,})", "mixed", _I, gate=("x-api-key", "x-auth-token", "x-access-token", "api-key", "private-token", "x-token")),
    _rule("auth_header", r"\bbearer\s+(?P<v>[A-Za-z0-9._~+/=-]{20,})", "mixed", _I, gate=("bearer",)),
    _rule("secret_assignment", r"(?<![A-Za-z0-9])(?:secret|token|api[-_]?key|apikey|api[-_]?secret|credentials?|private[-_]?key|encryption[-_]?key|signing[-_]?key|master[-_]?key|secret[-_]?key|access[-_]?key)" + _SEP + _VALUE, "mixed", _I, gate=("secret", "token", "api", "credential", "private", "encryption", "signing", "master", "access")),
)

RULE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(rule.name for rule in RULES))

_PLACEHOLDER = re.compile(
    r"^[<\[{(]|[>\]})]$|\$\{|\{\{|\$\(|%\(|^\$|^!|^%|^@"
    r"|x{6,}|X{6,}|\*{4,}|\.{3}|0{8,}"
    r"|example|your[-_ ]?|placeholder|changeme|change[-_]me|dummy|redacted|sample|secret_here|here$|todo|fixme|replace",
    re.IGNORECASE,
)
_REFERENCE = re.compile(r"^[A-Za-z_]+(?:\.[A-Za-z_]+)+$|[()\[\]]|^(?:none|null|nil|true|false|undefined|required|optional)$",
                        re.IGNORECASE)
# Names, not secrets: words joined by separators, camelCase words, one all-caps word. Each
# alternative is unambiguous (every split point is forced), so matching is linear.
_IDENTIFIER = re.compile(r"[A-Za-z]+(?:[-_.][A-Za-z]+)+|[A-Z]?[a-z]{2,}(?:[A-Z][a-z]{2,})*|[A-Z]+")
_PATH = re.compile(r"(?:/|\./|~/)[\w.-]+(?:/[\w.-]+)*/?")
_SYMBOL = re.compile(r"[^A-Za-z0-9]")


def plausible(value: str, strength: str) -> bool:
    """Does ``value`` look like a real secret rather than a placeholder, a reference or code?"""
    if (_PLACEHOLDER.search(value) or _REFERENCE.search(value) or _PATH.fullmatch(value)
            or len(set(value)) < 4):
        return False
    if strength == "any":
        return True
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))
    if strength == "mixed":
        # "X-Api-Key", "engram-storage-tls", "secretName" name things.
        return classes >= 2 and len(value) >= 8 and _IDENTIFIER.fullmatch(value) is None
    # "password": a letter, and a digit or a symbol (prose like "password policy" has neither).
    has_letter = re.search(r"[A-Za-z]", value) is not None
    return has_letter and classes >= 2 and (re.search(r"\d", value) is not None or _SYMBOL.search(value) is not None)


def _is_host_token(header_b64: str) -> bool:
    try:
        header = json.loads(base64.urlsafe_b64decode(header_b64 + "=" * (-len(header_b64) % 4)))
    except (ValueError, UnicodeDecodeError):
        return False
    typ = header.get("typ") if isinstance(header, dict) else None
    return isinstance(typ, str) and typ.lower().startswith("engram-")


def _fires(rule: Rule, match: re.Match[str]) -> bool:
    if rule.name == "host_token":
        return _is_host_token(match.group("h"))
    groups = match.groupdict()
    value = groups.get("v") or groups.get("w")
    if value is None:
        return "v" not in groups
    return plausible(value.rstrip(".:)"), rule.strength)


def match_rules(text: str) -> str | None:
    """The name of the first rule with a plausible match in ``text``, else None."""
    lowered = text.lower()
    for rule in RULES:
        if rule.gate and not any(word in lowered for word in rule.gate):
            continue
        for match in rule.pattern.finditer(text):
            if _fires(rule, match):
                return rule.name
    return None
