"""Secrets are masked; ordinary training output is left alone."""

from __future__ import annotations

import pytest

from carl_tui.redact import MASK, env_secrets, is_secret_name, redact, redact_lines

HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
ANT = "sk-ant-api03-Zyx_wvu-TSRqpo0987654321abcdEFGH"


@pytest.mark.parametrize("text,expected", [
    (f"token {HF} here", f"token {MASK} here"),
    (f"key={ANT}", f"key={MASK}"),
    (f"x {ANT}.", f"x {MASK}."),
    ("Authorization: Bearer abc.def-ghi_123", f"Authorization: {MASK}"),
    ("authorization=token xyz987654", f"authorization={MASK}"),
    ('{"Authorization": "Bearer eyJhbGciOi.J9x"}', f'{{"Authorization": "{MASK}"}}'),
    ("curl -H 'Bearer abcdefgh1234' url", f"curl -H 'Bearer {MASK}' url"),
    ("x-api-key: secretvalue123", f"x-api-key: {MASK}"),
    ("WANDB_API_KEY=0123abcd4567", f"WANDB_API_KEY={MASK}"),
    ('{"api_key": "abcd1234xyz"}', f'{{"api_key": "{MASK}"}}'),
    ("password: hunter2hunter", f"password: {MASK}"),
    ("HF_TOKEN=plain-value-99", f"HF_TOKEN={MASK}"),
    ("api_org_AbCdEfGhIjKlMnOp", MASK),
])
def test_secrets_are_masked(text, expected):
    assert redact(text, env={}) == expected


@pytest.mark.parametrize("text", [
    "{'loss': 0.1234, 'grad_norm': 1.5, 'learning_rate': 1e-06, 'num_tokens': 45678.0}",
    "tokens=1234 max_new_tokens=256 step=3",
    "pad_token: <pad> eos_token=</s>",
    "reward 0.5 entropy 2.3 kl 0.01 completions/mean_length 143.5",
    "Loading checkpoint shards: 100%|██████████| 2/2 [00:01<00:00]",
    "hf_hub_download(repo_id='Qwen/Qwen2.5-0.5B')",  # 'hf_hub' is not a token
    "",
])
def test_ordinary_output_is_untouched(text):
    assert redact(text, env={}) == text


def test_environment_values_named_like_secrets():
    env = {"HF_TOKEN": "tok-value-1234567", "MY_DB_PASSWORD": "pa55word!x",
           "AWS_SECRET_ACCESS_KEY": "AKIAxyz/+abc", "PATH": "/usr/bin",
           "TOKENIZERS_PARALLELISM": "false", "SHORT_KEY": "1", "HOME": "/root"}
    # Names with TOKEN/KEY/SECRET/PASSWORD count; values too short to be secrets ("false") do not.
    assert set(env_secrets(env)) == {"tok-value-1234567", "pa55word!x", "AKIAxyz/+abc"}
    line = "connect pa55word!x with tok-value-1234567 and AKIAxyz/+abc from /usr/bin false"
    assert redact(line, env=env) == f"connect {MASK} with {MASK} and {MASK} from /usr/bin false"
    assert is_secret_name("anthropic_api_key") and not is_secret_name("PATH")


def test_process_environment_is_the_default(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "zz-secret-zz-42")
    assert redact("value zz-secret-zz-42") == f"value {MASK}"


def test_extra_literal_secrets_and_lines():
    out = redact_lines(["a my-own-secret b", "c"], ["my-own-secret", None, "x"], env={})
    assert out == [f"a {MASK} b", "c"]


def test_idempotent():
    once = redact(f"HF_TOKEN={HF} Authorization: Bearer {ANT}", env={})
    assert redact(once, env={}) == once
    assert HF not in once and ANT not in once
