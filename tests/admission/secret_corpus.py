"""The labelled corpus of never-store screening: synthetic secrets and benign look-alikes.

Every sample is generated here from a fixed seed (no real secret is, or ever was, in this
repository): each positive kind builds well-formed values of its format inside the prose,
config or code an agent would plausibly capture; each benign kind builds what a detector
could mistake for one (digests, ids, public keys, placeholders, images, prose about keys).
``tests/admission/test_screening_corpus.py`` scores the screener on it and
``docs/admission.md`` reports the figures.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass

UPPER, LOWER, DIGITS = string.ascii_uppercase, string.ascii_lowercase, string.digits
ALNUM = UPPER + LOWER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"


@dataclass(frozen=True)
class Sample:
    kind: str
    text: str
    secret: bool
    # Where the sample is placed in the capture: a component's text, a citation's locator
    # value, the evidence reference, or a key of a nested object (screening reads them all).
    place: str = "text"


def _s(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _password(rng: random.Random) -> str:
    word = rng.choice(["Falcon", "Harbor", "Quartz", "Meadow", "Copper", "Lantern", "Saffron", "Tundra"])
    return f"{word}{rng.randint(10, 9999)}{rng.choice('!#%&*+-.@^_~')}{_s(rng, ALNUM, rng.randint(2, 6))}"


def _jws(rng: random.Random, header: dict, claims: dict) -> str:
    head = _b64u(json.dumps(header, separators=(",", ":")).encode())
    body = _b64u(json.dumps(claims, separators=(",", ":")).encode())
    return f"{head}.{body}.{_b64u(rng.randbytes(64))}"


def _pem(rng: random.Random, label: str, lines: int = 6) -> str:
    body = base64.b64encode(rng.randbytes(48 * lines)).decode()
    wrapped = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{wrapped}\n-----END {label}-----"


def _pick(rng: random.Random, templates: list[str]) -> str:
    return rng.choice(templates)


# -- positive kinds ---------------------------------------------------------------------------
# Each returns one sample text; called six times with differently seeded generators.

def aws_access_key(rng: random.Random, i: int) -> str:
    key = rng.choice(["AKIA", "ASIA"]) + _s(rng, UPPER + "234567", 16)
    return [f"Decision: the deploy user is {key}, scoped to the artifacts bucket.",
            f"aws_access_key_id = {key}",
            f"export AWS_ACCESS_KEY_ID={key}",
            f'{{"AccessKeyId": "{key}", "Region": "eu-central-1"}}',
            f"The CI job failed because {key} was deactivated yesterday.",
            f"[profile ops]\naws_access_key_id={key}\nregion=us-east-1"][i]


def aws_secret_key(rng: random.Random, i: int) -> str:
    secret = _s(rng, B64, 40)
    return [f"aws_secret_access_key = {secret}",
            f"AWS_SECRET_ACCESS_KEY={secret}",
            f'"SecretAccessKey": "{secret}"',
            f"The secret access key for the backup role is {secret} (rotate after the audit).",
            f"[default]\naws_secret_access_key={secret}",
            f"aws configure set aws_secret_access_key {secret}"][i]


def github_token(rng: random.Random, i: int) -> str:
    token = rng.choice(["ghp_", "gho_", "ghs_", "ghu_", "ghr_"]) + _s(rng, ALNUM, 36)
    pat = "github_pat_" + _s(rng, ALNUM, 22) + "_" + _s(rng, ALNUM, 59)
    return [f"Use {token} to push release tags.",
            f"GITHUB_TOKEN={token}",
            f"git clone https://x-access-token:{token}@github.com/acme/infra.git",
            f"The fine-grained token {pat} only reads the docs repo.",
            f'{{"github": {{"token": "{pat}"}}}}',
            f"gh auth login --with-token <<< {token}"][i]


def gitlab_token(rng: random.Random, i: int) -> str:
    token = "glpat-" + _s(rng, ALNUM + "_-", 20)
    return [f"Deploy with the GitLab token {token}.",
            f"GITLAB_TOKEN={token}",
            f"private_token: {token}",
            f'curl --header "PRIVATE-TOKEN: {token}" https://gitlab.example.com/api/v4/projects',
            f"The runner registration used {token}; revoke it after the migration.",
            f"token = '{token}'"][i]


def slack_token(rng: random.Random, i: int) -> str:
    kind = rng.choice(["xoxb", "xoxp", "xoxa", "xoxs"])
    token = f"{kind}-{_s(rng, DIGITS, 12)}-{_s(rng, DIGITS, 13)}-{_s(rng, ALNUM, 24)}"
    return [f"The bot posts with {token}.",
            f"SLACK_BOT_TOKEN={token}",
            f'slack:\n  token: "{token}"',
            f"Decision: the alerts app keeps using {token} until Q3.",
            f'client = WebClient(token="{token}")',
            f"Authorization: Bearer {token}"][i]


def slack_webhook(rng: random.Random, i: int) -> str:
    url = f"https://hooks.slack.com/services/T{_s(rng, UPPER + DIGITS, 10)}/B{_s(rng, UPPER + DIGITS, 10)}/{_s(rng, ALNUM, 24)}"
    return [f"Alerts go to {url}",
            f"SLACK_WEBHOOK_URL={url}",
            f'webhook_url: "{url}"',
            f"Decision: the on-call channel's incoming webhook is {url}.",
            f"curl -X POST -H 'Content-type: application/json' --data '{{\"text\":\"hi\"}}' {url}",
            f'{{"notify": {{"slack": "{url}"}}}}'][i]


def discord_webhook(rng: random.Random, i: int) -> str:
    host = rng.choice(["discord.com", "discordapp.com", "canary.discord.com"])
    url = f"https://{host}/api/webhooks/{_s(rng, DIGITS, 18)}/{_s(rng, B64URL, 68)}"
    token = f"{_s(rng, 'MNO', 1)}{_s(rng, ALNUM, 23)}.{_s(rng, B64URL, 6)}.{_s(rng, B64URL, 38)}"
    return [f"Release notes are posted to {url}",
            f"DISCORD_WEBHOOK={url}",
            f"The community bot runs with token {token}.",
            f"DISCORD_BOT_TOKEN={token}",
            f'{{"webhook": "{url}"}}',
            f"Decision: use {url} for build failures."][i]


def teams_webhook(rng: random.Random, i: int) -> str:
    url = (f"https://{rng.choice(['acme', 'contoso', 'initech'])}.webhook.office.com/webhookb2/{uuid.UUID(int=rng.getrandbits(128))}"
           f"@{uuid.UUID(int=rng.getrandbits(128))}/IncomingWebhook/{_s(rng, HEX, 32)}/{uuid.UUID(int=rng.getrandbits(128))}")
    return [f"Teams alerts: {url}",
            f"TEAMS_WEBHOOK_URL={url}",
            f'teams:\n  webhook: "{url}"',
            f"Decision: incidents are announced through {url}.",
            f"Invoke-RestMethod -Method Post -Uri '{url}' -Body $json",
            f'{{"channel": "ops", "url": "{url}"}}'][i]


def telegram_bot_token(rng: random.Random, i: int) -> str:
    token = f"{rng.randint(100000000, 9999999999)}:AA{_s(rng, B64URL, 33)}"
    return [f"The reminder bot's token is {token}.",
            f"TELEGRAM_BOT_TOKEN={token}",
            f"https://api.telegram.org/bot{token}/sendMessage",
            f'bot = Bot("{token}")',
            f"telegram:\n  token: {token}",
            f"Decision: {token} belongs to the staging bot."][i]


def stripe_key(rng: random.Random, i: int) -> str:
    key = rng.choice(["sk_live_", "rk_live_", "sk_test_"]) + _s(rng, ALNUM, rng.choice([24, 32, 99]))
    hook = "whsec_" + _s(rng, ALNUM, 32)
    return [f"Billing uses {key}.",
            f"STRIPE_SECRET_KEY={key}",
            f"stripe.api_key = '{key}'",
            f"The webhook signing secret is {hook}.",
            f"STRIPE_WEBHOOK_SECRET={hook}",
            f'{{"stripe": {{"secret": "{key}"}}}}'][i]


def ai_api_key(rng: random.Random, i: int) -> str:
    openai = "sk-" + rng.choice(["", "proj-"]) + _s(rng, ALNUM, 20) + "T3BlbkFJ" + _s(rng, ALNUM, 20)
    anthropic = "sk-ant-api03-" + _s(rng, B64URL, 93) + "AA"
    return [f"OPENAI_API_KEY={openai}",
            f"The evaluation harness calls the model with {openai}.",
            f"ANTHROPIC_API_KEY={anthropic}",
            f'client = Anthropic(api_key="{anthropic}")',
            f'openai.api_key = "{openai}"',
            f"Decision: the summariser key is {anthropic}."][i]


def google_api_key(rng: random.Random, i: int) -> str:
    key = "AIza" + _s(rng, ALNUM + "_-", 35)
    return [f"Maps requests carry {key}.",
            f"GOOGLE_API_KEY={key}",
            f"https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key={key}",
            f'firebaseConfig = {{ apiKey: "{key}", projectId: "acme-prod" }}',
            f"gemini:\n  api_key: {key}",
            f"Decision: restrict {key} to the Android app."][i]


def package_registry_token(rng: random.Random, i: int) -> str:
    npm = "npm_" + _s(rng, ALNUM, 36)
    pypi = "pypi-AgEIcHlwaS5vcmc" + _s(rng, B64URL, 60)
    return [f"//registry.npmjs.org/:_authToken={npm}",
            f"NPM_TOKEN={npm}",
            f"Publish with {npm} from the release job.",
            f"[pypi]\nusername = __token__\npassword = {pypi}",
            f"TWINE_PASSWORD={pypi}",
            f"uv publish --token {pypi}"][i]


def messaging_api_key(rng: random.Random, i: int) -> str:
    sendgrid = f"SG.{_s(rng, B64URL, 22)}.{_s(rng, B64URL, 43)}"
    twilio = "SK" + _s(rng, HEX, 32)
    mailchimp = _s(rng, HEX, 32) + f"-us{rng.randint(1, 20)}"
    return [f"SENDGRID_API_KEY={sendgrid}",
            f"Transactional mail goes out with {sendgrid}.",
            f"TWILIO_API_KEY={twilio}\nTWILIO_API_SECRET={_s(rng, ALNUM, 32)}",
            f"The SMS sender authenticates as {twilio}.",
            f"MAILCHIMP_API_KEY={mailchimp}",
            f"Newsletter sync uses the Mailchimp key {mailchimp}."][i]


def commerce_token(rng: random.Random, i: int) -> str:
    shopify = rng.choice(["shpat_", "shpss_", "shpca_"]) + _s(rng, HEX, 32)
    square = "sq0csp-" + _s(rng, B64URL, 43)
    square_at = "EAAA" + _s(rng, B64URL, 60)
    return [f"The storefront app uses {shopify}.",
            f"SHOPIFY_ACCESS_TOKEN={shopify}",
            f"SQUARE_APPLICATION_SECRET={square}",
            f"Payments go through Square with access token {square_at}.",
            f'{{"shopify": {{"admin_token": "{shopify}"}}}}',
            f"square:\n  access_token: {square_at}"][i]


def azure_credential(rng: random.Random, i: int) -> str:
    key = base64.b64encode(rng.randbytes(64)).decode()
    sig = urllib.parse.quote(base64.b64encode(rng.randbytes(32)).decode(), safe="")
    conn = f"DefaultEndpointsProtocol=https;AccountName=acmelogs;AccountKey={key};EndpointSuffix=core.windows.net"
    sas = f"https://acmelogs.blob.core.windows.net/exports?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2027-01-01T00:00:00Z&sig={sig}"
    return [conn,
            f"AZURE_STORAGE_CONNECTION_STRING={conn}",
            f"The export link is {sas}",
            f"AccountKey={key}",
            f"Decision: the log archive is read with {sas}.",
            f"azure_client_secret = {_s(rng, ALNUM + '~._-', 40)}"][i]


def private_key_pem(rng: random.Random, i: int) -> str:
    label = ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "DSA PRIVATE KEY",
             "RSA PRIVATE KEY"][i]
    pem = _pem(rng, label)
    return [pem, f"tls.key: |\n  {pem.replace(chr(10), chr(10) + '  ')}", f"Here is the key file:\n{pem}",
            json.dumps({"private_key": pem}), f"The signing key:\n{pem}\n(keep it safe)",
            pem.replace("\n", "\\n")][i]


def private_key_other(rng: random.Random, i: int) -> str:
    ssh = _pem(rng, "OPENSSH PRIVATE KEY")
    pgp = _pem(rng, "PGP PRIVATE KEY BLOCK")
    putty = (f"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy\nPublic-Lines: 2\n"
             f"{_s(rng, B64, 64)}\nPrivate-Lines: 1\n{_s(rng, B64, 64)}\nPrivate-MAC: {_s(rng, HEX, 64)}")
    return [ssh, f"~/.ssh/id_ed25519:\n{ssh}", pgp, f"Backup of the release signing key:\n{pgp}", putty,
            json.dumps({"ssh_key": ssh})][i]


def jwt(rng: random.Random, i: int) -> str:
    token = _jws(rng, {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"},
                 {"sub": f"user-{rng.randint(1, 9999)}", "iat": 1_700_000_000 + rng.randint(0, 10**6),
                  "scope": "read write"})
    return [f"The session token was {token}",
            f"Authorization: Bearer {token}",
            f"id_token={token}",
            f'{{"access_token": "{token}", "token_type": "Bearer"}}',
            f"Decision: the test fixture signs in with {token}.",
            f"curl -H 'Authorization: Bearer {token}' https://api.example.com/me"][i]


def host_token(rng: random.Random, i: int) -> str:
    typ = rng.choice(["engram-context+jwt", "engram-confirmation+jwt"])
    token = _jws(rng, {"alg": "EdDSA", "typ": typ, "kid": f"host-key-{rng.randint(1, 9)}"},
                 {"iss": "host:acme", "tenant": "t1", "workspace": "w1", "jti": _s(rng, ALNUM, 22)})
    return [token,
            f'_meta: {{"io.engram/context": "{token}"}}',
            f"The host sent {token} with the call.",
            f'{{"io.engram/confirmation": "{token}"}}',
            f"context={token}",
            f"Decision: replay {token} to reproduce the bug."][i]


def password_prose(rng: random.Random, i: int) -> str:
    pw = _password(rng)
    return [f"My password is {pw}, please remember it.",
            f"The wifi password: {pw}",
            f"Das Passwort lautet {pw}.",
            f"Log in as admin with password {pw} on the staging box.",
            f"Use passphrase '{pw}' to unlock the backup archive.",
            f"Ada's VPN login is ada / {pw}."][i]


def password_config(rng: random.Random, i: int) -> str:
    pw = _password(rng)
    return [f"database:\n  user: app\n  password: {pw}",
            f"[mysql]\nuser=root\npassword={pw}",
            f'{{"username": "svc", "password": "{pw}"}}',
            f"<connection><user>sa</user><password>{pw}</password></connection>",
            f"mysql -u root -p'{pw}' -h db.internal",
            f"spring.datasource.password={pw}"][i]


def dsn(rng: random.Random, i: int) -> str:
    pw = _password(rng).replace("@", "!").replace("/", "-")
    return [f"postgres://app:{pw}@db.internal:5432/orders",
            f"DATABASE_URL=mysql://root:{pw}@10.0.0.5:3306/shop",
            f"mongodb+srv://ops:{pw}@cluster0.abcde.mongodb.net/prod?retryWrites=true",
            f"REDIS_URL=redis://:{pw}@cache.internal:6379/0",
            f"amqp://guest:{pw}@rabbit.internal:5672/vhost",
            f"Server=tcp:sql.internal,1433;Database=crm;User Id=sa;Password={pw};Encrypt=true"][i]


def dotenv_line(rng: random.Random, i: int) -> str:
    value = _s(rng, ALNUM, rng.randint(24, 48))
    name = ["API_TOKEN", "SECRET_KEY_BASE", "DJANGO_SECRET_KEY", "AUTH0_CLIENT_SECRET", "SESSION_SECRET",
            "JWT_SIGNING_KEY"][i]
    return [f"{name}={value}", f"export {name}={value}", f"# .env\nDEBUG=false\n{name}={value}",
            f'{name}="{value}"', f"The .env for staging sets {name}={value}.", f"env:\n  - {name}={value}"][i]


def session_cookie(rng: random.Random, i: int) -> str:
    value = _s(rng, ALNUM, 32)
    return [f"Cookie: sessionid={value}; csrftoken={_s(rng, ALNUM, 32)}",
            f"Set-Cookie: __Secure-next-auth.session-token={value}; Path=/; HttpOnly; Secure",
            f"connect.sid=s%3A{value}.{_s(rng, B64URL, 43)}",
            f"PHPSESSID={_s(rng, LOWER + DIGITS, 26)}",
            f"JSESSIONID={_s(rng, HEX.upper(), 32)}",
            f"curl -b 'laravel_session={value}' https://shop.example.com/cart"][i]


def auth_header(rng: random.Random, i: int) -> str:
    opaque = _s(rng, ALNUM, 40)
    basic = base64.b64encode(f"deploy:{_password(rng)}".encode()).decode()
    return [f"Authorization: Bearer {opaque}",
            f'curl -H "Authorization: Bearer {opaque}" https://api.internal/v1/jobs',
            f"Authorization: Basic {basic}",
            f"X-Api-Key: {opaque}",
            f'headers = {{"Authorization": "Token {opaque}"}}',
            f"requests.get(url, headers={{'x-api-key': '{opaque}'}})"][i]


def secret_assignment(rng: random.Random, i: int) -> str:
    value = _s(rng, ALNUM + "-_", rng.randint(28, 44))
    return [f'client_secret = "{value}"',
            f"signing_secret: {value}",
            f'{{"apiKey": "{value}"}}',
            f"auth_token={value}",
            f'encryption_key = "{_s(rng, HEX, 64)}"',
            f"webhook_secret: '{value}'"][i]


def basic_auth_url(rng: random.Random, i: int) -> str:
    pw = _password(rng).replace("@", "!").replace("/", "-").replace(":", ".")
    return [f"https://deploy:{pw}@git.example.com/acme/app.git",
            f"ftp://backup:{pw}@files.example.com/nightly/",
            f"pip install --index-url https://ci:{pw}@pypi.internal/simple app",
            f"Decision: the mirror is https://mirror:{pw}@artifacts.internal/repo.",
            f"registry: https://bot:{pw}@registry.example.com",
            f"git remote set-url origin https://ada:{pw}@github.com/acme/site.git"][i]


def encoded_secret(rng: random.Random, i: int) -> str:
    pem = _pem(rng, "RSA PRIVATE KEY", 3)
    aws = "AKIA" + _s(rng, UPPER + "234567", 16)
    gh = "ghp_" + _s(rng, ALNUM, 36)
    pw = _password(rng).replace("@", "!")
    return [f"apiVersion: v1\nkind: Secret\ndata:\n  tls.key: {base64.b64encode(pem.encode()).decode()}",
            f"The blob decodes to the key: {base64.b64encode(f'aws_access_key_id={aws}'.encode()).decode()}",
            f"token (base64): {base64.b64encode(gh.encode()).decode()}",
            f"redirect=https%3A%2F%2Fapp.example.com%3Fdsn%3D{urllib.parse.quote(f'postgres://app:{pw}@db:5432/x', safe='')}",
            f"https://api.example.com/login?user=ada&password%3D{urllib.parse.quote(pw, safe='')}",
            f"GITHUB_TOKEN_B64={base64.b64encode(gh.encode()).decode()}"][i]


POSITIVE_KINDS: dict[str, Callable[[random.Random, int], str]] = {
    f.__name__: f for f in (
        aws_access_key, aws_secret_key, github_token, gitlab_token, slack_token, slack_webhook, discord_webhook,
        teams_webhook, telegram_bot_token, stripe_key, ai_api_key, google_api_key, package_registry_token,
        messaging_api_key, commerce_token, azure_credential, private_key_pem, private_key_other, jwt, host_token,
        password_prose, password_config, dsn, dotenv_line, session_cookie, auth_header, secret_assignment,
        basic_auth_url, encoded_secret,
    )
}


# -- benign look-alikes -----------------------------------------------------------------------

def digests(rng: random.Random, i: int) -> str:
    data = rng.randbytes(32)
    return [f"content_digest sha256:{hashlib.sha256(data).hexdigest()}",
            f"The file's SHA-1 is {hashlib.sha1(data).hexdigest()}.",
            f"md5sum: {hashlib.md5(data).hexdigest()}  release.tar.gz",
            f"sha512: {hashlib.sha512(data).hexdigest()}",
            f"image: ghcr.io/acme/engram@sha256:{hashlib.sha256(data).hexdigest()}",
            f"record_digest=sha256:{hashlib.sha256(data).hexdigest()}"][i]


def commit_ids(rng: random.Random, i: int) -> str:
    full = _s(rng, HEX, 40)
    return [f"Fixed in commit {full}.",
            f"Decision: revert {full[:7]} and {_s(rng, HEX, 7)} before the release.",
            f"git checkout {full}",
            f"Merge pull request #412 from acme/fix ({full[:12]})",
            f"The regression started at {full} (bisected).",
            f"pinned: rev = \"{full}\""][i]


def uuids(rng: random.Random, i: int) -> str:
    u = uuid.UUID(int=rng.getrandbits(128), version=4)
    return [f"request id {u}",
            f"The failing job was {u}.",
            f'{{"trace_id": "{u.hex}", "span_id": "{_s(rng, HEX, 16)}"}}',
            f"tenant_id: {u}",
            f"Decision: correlation ids like {u} stay in the logs.",
            f"/api/v1/orders/{u}/items"][i]


def public_keys(rng: random.Random, i: int) -> str:
    ed = "AAAAC3NzaC1lZDI1NTE5AAAAI" + _s(rng, B64, 43)
    rsa = "AAAAB3NzaC1yc2EAAAADAQABAAABAQ" + _s(rng, B64, 300)
    return [f"ssh-ed25519 {ed} ada@laptop",
            f"authorized_keys: ssh-rsa {rsa} deploy@ci",
            _pem(rng, "PUBLIC KEY", 3),
            _pem(rng, "CERTIFICATE", 6),
            _pem(rng, "PGP PUBLIC KEY BLOCK", 4),
            f'attester key {{"key_id": "attester-1", "public_key": "{_b64u(rng.randbytes(32))}"}}'][i]


def placeholders(rng: random.Random, i: int) -> str:
    return ["AWS_ACCESS_KEY_ID=<your-access-key-id>\nAWS_SECRET_ACCESS_KEY=<your-secret-access-key>",
            "password: ${DB_PASSWORD}",
            "Set api_key = \"YOUR_API_KEY_HERE\" in the config.",
            "token: {{ .Values.slack.token }}",
            "GITHUB_TOKEN=ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
            "The AWS docs use AKIAIOSFODNN7EXAMPLE as the sample access key."][i]


def base64_images(rng: random.Random, i: int) -> str:
    magic = [b"\x89PNG\r\n\x1a\n", b"GIF89a", b"\xff\xd8\xff\xe0", b"RIFF\x00\x00\x00\x00WEBP", b"\x89PNG\r\n\x1a\n",
             b"<svg xmlns='http://www.w3.org/2000/svg'>"][i]
    data = base64.b64encode(magic + rng.randbytes(rng.randint(120, 600))).decode()
    mime = ["png", "gif", "jpeg", "webp", "png", "svg+xml"][i]
    return [f"data:image/{mime};base64,{data}",
            f'<img src="data:image/{mime};base64,{data}" alt="logo">',
            f"![chart](data:image/{mime};base64,{data})",
            f'{{"avatar": "data:image/{mime};base64,{data}"}}',
            f"background: url(data:image/{mime};base64,{data});",
            f"icon: data:image/{mime};base64,{data}"][i]


def prose_about_secrets(rng: random.Random, i: int) -> str:
    return ["Decision: we rotate API keys every 90 days and keep them in Vault.",
            "The password policy requires 12 characters and a second factor.",
            "Never paste a bearer token into a ticket; link the secret's Vault path instead.",
            "Das Passwort wird nie im Klartext gespeichert; nur der Hash liegt in der Datenbank.",
            "The secret to a stable build is pinning grpcio and protobuf together.",
            "Tokens issued by the identity provider expire after one hour."][i]


def urls_without_credentials(rng: random.Random, i: int) -> str:
    return [f"https://docs.example.com/guide?page={rng.randint(1, 99)}&lang=en",
            "git clone ssh://git@github.com/acme/infra.git",
            "postgres://db.internal:5432/app is the read replica.",
            "Incoming webhooks are described at https://api.slack.com/messaging/webhooks.",
            f"https://acme.slack.com/archives/C{_s(rng, UPPER + DIGITS, 10)}/p{_s(rng, DIGITS, 16)}",
            "redis://cache.internal:6379/0"][i]


def engram_ids(rng: random.Random, i: int) -> str:
    return [f"candidate cand_{_s(rng, 'abcdefghijklmnopqrstuvwxyz234567', 26)}",
            f"record rec_{_s(rng, 'abcdefghijklmnopqrstuvwxyz234567', 26)} superseded the old one",
            f"idempotency_key: capture-{_s(rng, HEX, 32)}",
            "The host puts its context under io.engram/context and the confirmation under io.engram/confirmation.",
            "A context token has typ engram-context+jwt and is valid for 60 seconds.",
            f"audit id aud_{_s(rng, 'abcdefghijklmnopqrstuvwxyz234567', 26)}"][i]


def config_without_secrets(rng: random.Random, i: int) -> str:
    return ["password_min_length: 12\npassword_max_age_days: 90",
            "token_ttl_seconds: 3600",
            "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db-credentials\n        key: password",
            "api_key_header: X-Api-Key",
            "auth:\n  passwordless: true\n  provider: oidc",
            "secret_name: engram-storage-tls"][i]


def env_references(rng: random.Random, i: int) -> str:
    return ["token = os.environ['GITHUB_TOKEN']",
            "export API_TOKEN=$(vault kv get -field=token secret/ci)",
            "DB_PASSWORD_FILE=/run/secrets/db_password",
            "const key = process.env.STRIPE_SECRET_KEY;",
            "password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256",
            "SECRET_KEY=${SECRET_KEY:?set it in the environment}"][i]


def identifiers(rng: random.Random, i: int) -> str:
    return [f"pod engram-storage-{_s(rng, HEX, 10)}-{_s(rng, LOWER + DIGITS, 5)} restarted",
            "AbstractSingletonProxyFactoryBeanConfigurationHandlerInterceptor",
            "tests/admission/test_screening_corpus.py::test_recall_and_false_positive_rate",
            f"order ORD-2026-{rng.randint(0, 999999):06d} shipped",
            "com.example.platform.billing.internal.InvoiceReconciliationService",
            f"build {rng.randint(1000, 9999)} of release v1.37.1 on 2026-12-03T10:00:00Z"][i]


def public_addresses(rng: random.Random, i: int) -> str:
    return [f"Donations: 0x{_s(rng, HEX, 40)}",
            f"BTC address bc1q{_s(rng, 'qpzry9x8gf2tvdw0s3jn54khce6mua7l', 38)}",
            "The office gateway is 203.0.113.7, the VPN 198.51.100.20.",
            f"Server fingerprint SHA256:{_s(rng, B64, 43)}",
            "Listen on 10.0.0.12:5432 and 127.0.0.1:6379.",
            f"IBAN check digits are public; the bank code is {rng.randint(10000000, 99999999)}."][i]


def lockfile_integrity(rng: random.Random, i: int) -> str:
    blob = rng.randbytes(64)
    return [f'"integrity": "sha512-{base64.b64encode(blob).decode()}"',
            f"requests==2.34.2 --hash=sha256:{hashlib.sha256(blob).hexdigest()}",
            f"golang.org/x/net v0.30.0 h1:{base64.b64encode(blob[:32]).decode()}",
            f"resolved \"https://registry.npmjs.org/ms/-/ms-2.1.3.tgz#{hashlib.sha1(blob).hexdigest()}\"",
            f'checksum = "{hashlib.sha256(blob).hexdigest()}"',
            f"sri: sha384-{base64.b64encode(blob[:48]).decode()}"][i]


def base64_text(rng: random.Random, i: int) -> str:
    texts = [b"Hello from the release notes", b'{"feature":"dark-mode","enabled":true}', b"meeting moved to Tuesday",
             b"#!/bin/sh\necho build", b"<p>Welcome</p>", b"version=3\nchannel=stable"]
    return [f"The field holds {base64.b64encode(texts[i]).decode()} (base64 of a greeting).",
            f"config.json: {base64.b64encode(texts[i]).decode()}",
            f"payload={base64.urlsafe_b64encode(texts[i]).decode()}",
            f"echo {base64.b64encode(texts[i]).decode()} | base64 -d",
            f"data:\n  note: {base64.b64encode(texts[i]).decode()}",
            f"The header eyJhbGciOiJIUzI1NiJ9 names the algorithm only; {base64.b64encode(texts[i]).decode()}"][i]


def secret_words(rng: random.Random, i: int) -> str:
    return ["Keyboard shortcut: Ctrl+K opens the token picker.",
            "The token economy of the game rewards daily logins.",
            "Password reset emails go out at 09:00 UTC.",
            "Top secret: the launch moved to Monday (not a credential).",
            "Use the private key of the attester only inside the HSM; this note records the policy.",
            "Session cookies are marked HttpOnly and SameSite=Lax."][i]


def code_snippets(rng: random.Random, i: int) -> str:
    return ["def check_password(candidate: str, stored_hash: bytes) -> bool:\n    return bcrypt.checkpw(candidate.encode(), stored_hash)",
            "if token is None:\n    raise Unauthorized()",
            "password = getpass.getpass('Password: ')",
            "api_key = settings.API_KEY",
            "secret = load_secret(name='stripe')",
            "const [password, setPassword] = useState('');"][i]


def markup(rng: random.Random, i: int) -> str:
    return [f"color: #{_s(rng, HEX, 6)}; background: #{_s(rng, HEX, 6)};",
            "<a href=\"/settings/tokens\" class=\"btn btn-primary\">Manage tokens</a>",
            f"[link](https://example.com/docs#section-{rng.randint(1, 40)})",
            "| key | value |\n|---|---|\n| retries | 3 |",
            "<meta name=\"csrf-param\" content=\"authenticity_token\">",
            "font-family: 'Inter', system-ui, sans-serif;"][i]


def manifests(rng: random.Random, i: int) -> str:
    return ["apiVersion: v1\nkind: ConfigMap\ndata:\n  LOG_LEVEL: info\n  REGION: eu-central-1",
            "volumes:\n  - name: tls\n    secret:\n      secretName: engram-gateway-tls",
            "serviceAccountName: engram-worker\nautomountServiceAccountToken: false",
            f"image: registry.example.com/engram/gateway:1.{rng.randint(0, 40)}.{rng.randint(0, 9)}",
            "resources:\n  limits:\n    memory: 512Mi\n    cpu: 500m",
            "ports:\n  - name: grpc\n    containerPort: 50051"][i]


def ordinary_prose(rng: random.Random, i: int) -> str:
    return ["Decision: the storage service batches journal writes in groups of 64.",
            "Ada prefers short status updates on Fridays.",
            "Die Suche liefert nur accepted_current-Datensätze.",
            "We moved the standup to 09:30 because of the school run.",
            "The customer asked for invoices in PDF and CSV.",
            "Latency p99 stayed under 120 ms during the load test."][i]


def numbers(rng: random.Random, i: int) -> str:
    return [f"Call +49 30 {rng.randint(1000000, 9999999)} for the front desk.",
            f"Invoice total: {rng.randint(100, 99999)}.{rng.randint(10, 99)} EUR",
            f"epoch {1_700_000_000 + rng.randint(0, 10**7)} ms {rng.randint(0, 999)}",
            f"ticket #{rng.randint(10000, 99999)} and PR #{rng.randint(100, 999)}",
            f"coordinates {rng.uniform(-90, 90):.6f}, {rng.uniform(-180, 180):.6f}",
            f"ISBN 978-3-{rng.randint(10, 99)}-{rng.randint(100000, 999999)}-{rng.randint(0, 9)}"][i]


BENIGN_KINDS: dict[str, Callable[[random.Random, int], str]] = {
    f.__name__: f for f in (
        digests, commit_ids, uuids, public_keys, placeholders, base64_images, prose_about_secrets,
        urls_without_credentials, engram_ids, config_without_secrets, env_references, identifiers, public_addresses,
        lockfile_integrity, base64_text, secret_words, code_snippets, markup, manifests, ordinary_prose, numbers,
    )
}

PER_KIND = 6
PLACES = ("text", "text", "text", "locator", "evidence", "key")


def samples(draw: int = 0) -> list[Sample]:
    """Every sample, in a fixed order: six per kind, positives first. Another ``draw`` makes
    other values of the same formats (the rules were written against draw 0)."""
    out: list[Sample] = []
    for secret, kinds in ((True, POSITIVE_KINDS), (False, BENIGN_KINDS)):
        for kind, make in kinds.items():
            for i in range(PER_KIND):
                rng = random.Random(f"{kind}/{i}" if draw == 0 else f"{kind}/{i}/{draw}")
                out.append(Sample(kind, make(rng, i), secret, PLACES[(i + len(kind)) % len(PLACES)]))
    return out


def placed(sample: Sample) -> tuple[dict, dict]:
    """The capture (payload, evidence) an agent would send with ``sample`` at its place."""
    from engram_hostkit.examples import make_capture_args

    if sample.place == "locator":
        args = make_capture_args(text="Decision: see the cited section.", locator_value=sample.text)
    elif sample.place == "evidence":
        args = make_capture_args(text="Decision: see the evidence.", evidence_ref=sample.text)
    else:
        args = make_capture_args(text=sample.text if sample.place == "text" else "Decision: see the notes.")
    payload, evidence = args["payload"], args["evidence"]
    if sample.place == "key":
        # Screening reads keys too: a sample smuggled in as the key of a nested object.
        payload = {**payload, "notes": {sample.text: "1"}}
    return payload, evidence


@dataclass(frozen=True)
class KindScore:
    kind: str
    secret: bool
    total: int
    flagged: int

    @property
    def rate(self) -> float:
        """Recall for a positive kind, false-positive rate for a benign one."""
        return self.flagged / self.total


def score(find: Callable[..., str | None], draws: int = 1) -> list[KindScore]:
    """Per kind: how many samples of ``draws`` draws ``find`` flagged, in corpus order."""
    counts: dict[tuple[str, bool], list[int]] = {}
    for sample in (s for draw in range(draws) for s in samples(draw)):
        hit = find(*placed(sample)) is not None
        total_flagged = counts.setdefault((sample.kind, sample.secret), [0, 0])
        total_flagged[0] += 1
        total_flagged[1] += hit
    return [KindScore(kind, secret, total, flagged) for (kind, secret), (total, flagged) in counts.items()]
