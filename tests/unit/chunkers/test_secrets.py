"""Secret detection and redaction (chunkers/secrets.py): what is found, what is left alone."""

from __future__ import annotations

import pytest

from recalld.chunkers import ChunkOptions, chunk_file
from recalld.chunkers.secrets import find_secrets, redact, shannon_entropy

# Made-up values in each provider's format (none is a real credential).
AWS_ID = "AKIAQ3EGRTX7NLZW4P6K"
AWS_SECRET = "k8Jd2+Lq9Wm4Xz7Rt1Vb5Nc3Hf6Gs0Yp8Ua2Ie4T"
GITHUB = "ghp_R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj5Gf0Ds2Ay7Pe"
SLACK = "xoxb-2048-1024-R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj"
OPENAI = "sk-proj-R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj5Gf0Ds"
ANTHROPIC = "sk-ant-api03-R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj5Gf0Ds2Ay7Pe"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0TH"
RANDOM = "Zx8Qm2Lp9Rt4Vb7Nc1Kd6Hf3Jg5Ws0Ye8Ua2Io"
KEY_BLOCK = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("line", "kind", "value"),
    [
        (f"AWS_ACCESS_KEY_ID={AWS_ID}", "aws_access_key", AWS_ID),
        (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_key", AWS_SECRET),
        (f"export GITHUB_TOKEN={GITHUB}", "github_token", GITHUB),
        (f"slack bot: {SLACK}", "slack_token", SLACK),
        (f'OPENAI_API_KEY="{OPENAI}"', "openai_key", OPENAI),
        (f"key = '{ANTHROPIC}'", "anthropic_key", ANTHROPIC),
        (f"session {JWT}", "jwt", JWT),
        ("db = postgres://app:s3cret-Pass@db:5432/app", "url_password", "s3cret-Pass"),
        ("password: hunter2", "password", "hunter2"),
        ('{"db_password": "correct horse battery"}', "password", "correct horse battery"),
        ('{"content": "{\\"api_key\\": \\"abc123def\\"}"}', "secret", "abc123def"),
        ("Authorization: Bearer abcdefghijklmnop1234", "bearer_token", "abcdefghijklmnop1234"),
        (f"blob {RANDOM} end", "high_entropy", RANDOM),
        (f"https://x.example.com/file?sig={RANDOM}", "high_entropy", RANDOM),
        (f"before\n{KEY_BLOCK}\nafter", "private_key", KEY_BLOCK),
    ],
)
def test_finds_and_replaces_the_value_only(line: str, kind: str, value: str) -> None:
    clean, found = redact(line)
    assert [f.kind for f in found] == [kind]
    assert line[found[0].start : found[0].end] == value
    assert value not in clean and f"[REDACTED:{kind}]" in clean
    assert clean == line.replace(value, f"[REDACTED:{kind}]")


@pytest.mark.parametrize(
    "line",
    [
        "token = get_token()",
        "token: Optional[str] = None",
        "api_key = settings.api_key",
        "api_key: Secret | None = None",
        "password = user_password",
        "max_tokens: 240",
        "tokenizer: bert-base-uncased",
        "the secret: we never ship on Fridays",
        "password: ${DB_PASSWORD}",
        'password: "<your password>"',
        "secret = true",
        "commit 3f9a1c0e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed it",
        "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "LD_LIBRARY_PATH=/build/reproducible-path/python3.11-3.11.2/debian",
        "someVeryLongCamelCaseIdentifierName2 = 1",
        "https://github.com/python/cpython/blob/785cc6770588de087d09e89a69110af2542be208/Lib",
        f"see https://docs.example.com/document/d/{RANDOM}/edit for the plan",
    ],
)
def test_leaves_ordinary_text_and_code_alone(line: str) -> None:
    assert find_secrets(line) == []


def test_unterminated_key_block_takes_its_base64_lines_not_the_rest() -> None:
    text = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx3f9\nQk2Lp9Rt4Vb7Nc1Kd6Hf\n\nNext: ok"
    clean, _ = redact(text)
    assert clean == "[REDACTED:private_key]\n\nNext: ok"


def test_entropy_can_be_switched_off() -> None:
    assert redact(f"blob {RANDOM}", entropy=False) == (f"blob {RANDOM}", [])
    assert shannon_entropy("aaaa") == 0.0 and shannon_entropy("ab") == 1.0


def test_chunk_file_redacts_before_chunking_and_records_where() -> None:
    text = f"# Deploy\n\nThe key is {AWS_ID} and the token {GITHUB}.\n".encode()
    parsed = chunk_file("notes.md", text)
    [chunk] = parsed.chunks
    assert AWS_ID not in chunk.text and GITHUB not in chunk.text
    assert [m["type"] for m in chunk.meta["redacted"]] == ["aws_access_key", "github_token"]
    at = chunk.meta["redacted"][0]["at"]
    assert chunk.text[at:].startswith("[REDACTED:aws_access_key]")
    assert parsed.notes == ["redacted 2 secrets: aws_access_key, github_token"]
    # Code and conversation logs too; and off when asked.
    code = chunk_file("app.py", f'TOKEN = "{GITHUB}"\n\ndef f():\n    return 1\n'.encode())
    assert all(GITHUB not in c.text for c in code.chunks)
    log = chunk_file("chat.jsonl", f'{{"role": "user", "content": "my key {OPENAI}"}}\n'.encode())
    assert log.kind == "conversation" and all(OPENAI not in c.text for c in log.chunks)
    kept = chunk_file("notes.md", text, ChunkOptions(redact=False))
    assert AWS_ID in kept.chunks[0].text and "redacted" not in kept.chunks[0].meta
