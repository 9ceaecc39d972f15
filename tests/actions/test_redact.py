"""Secrets are masked; ordinary training output is left alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from carl_tui.redact import (
    MASK,
    StreamRedactor,
    env_secrets,
    is_secret_key,
    is_secret_name,
    redact,
    redact_lines,
)

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
    "For faster downloads: pip install hf_transfer (or hf_xet...)",  # packages
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


# -- command-line flags, cut tokens --------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("python train.py --hub_token abcd1234efgh --lr 3",
     f"python train.py --hub_token {MASK} --lr 3"),
    ("--wandb-api-key 0123abcd4567", f"--wandb-api-key {MASK}"),
    ("run -password 'hunter2hunter'", f"run -password '{MASK}'"),
    (f"cut {HF[:9]}…", f"cut {MASK}…"),  # a token cut short by a truncation
    (f"cut {ANT[:11]}...", f"cut {MASK}..."),
])
def test_flags_and_cut_tokens_are_masked(text, expected):
    assert redact(text, env={}) == expected


@pytest.mark.parametrize("text", [
    "--max_new_tokens 256 --num-tokens 1000 --pad_token <pad>",
    "--hub-token --push-to-hub",  # the flag's value is another flag: nothing to mask
    "--tokenizer gpt2 --token-budget 5",
    "pip install hf_xet... done; see sk-ant-... in the docs",  # no token cut short here
])
def test_flags_that_are_not_secrets_are_untouched(text):
    assert redact(text, env={}) == text


@pytest.mark.parametrize("name", [
    "hub_token", "HF_TOKEN", "WANDB_API_KEY", "apiKey", "accessToken", "HFToken", "--hub-token",
    "password", "db_passwd", "secrets", "client_secret", "private_key", "Authorization",
    "x-api-key", "refresh_token", "wandb_key", "--wandb-key", "wandbKey", "sort_key",
    "db_password_file", "my_secret_name",
])
def test_secret_field_names(name):
    assert is_secret_key(name)


@pytest.mark.parametrize("name", [
    "max_new_tokens", "num_tokens", "tokenizer_name", "pad_token", "eos_token_id", "key",
    "monkey", "keyboard", "--key-steps", "learning_rate", "report_to",
    "additional_special_tokens", "", 3,
])
def test_ordinary_field_names(name):
    assert not is_secret_key(name)


# Every `*_key`, `*_token`, `*password*` and `*secret*` name, in a config, a command line
# (both spellings of a flag) and text: the value never shows.
SECRET_NAMES = ("wandb_key", "hub_token", "db_password", "password_file", "my_secret",
                "secret_sauce", "comet_api_key", "neptune_key")


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_every_secret_name_is_masked_in_config_argv_and_text(name):
    from carl_tui.events import RunMeta, RunRef
    from carl_tui.redact import redact_argv
    from carl_tui.store.sanitize import clean_event

    value = "plainValue12345"
    flag = "--" + name.replace("_", "-")
    meta = clean_event(RunMeta(RunRef("jsonl", "p", "run"), {
        "config": {name: value, "lr": 1e-4},
        "command": ["python", "t.py", flag, value, "--lr", "1e-4"]})).meta
    assert meta["config"] == {name: MASK, "lr": 1e-4}
    assert meta["command"] == ["python", "t.py", flag, MASK, "--lr", "1e-4"]
    assert redact_argv(["python", "t.py", flag, value, "--seed", "3"]) == (
        "python", "t.py", flag, MASK, "--seed", "3")
    assert redact_argv([f"{flag}={value}"]) == (f"{flag}={MASK}",)
    for text in (f"{name}={value}", f"{name}: {value}", f'{{"{name}": "{value}"}}',
                 f"python t.py {flag} {value} --lr 1e-4", f"export {name.upper()}={value}"):
        assert value not in redact(text, env={}), text
    assert redact(f"python t.py {flag} {value} --lr 1e-4", env={}) == \
        f"python t.py {flag} {MASK} --lr 1e-4"


# -- text that arrives in pieces -----------------------------------------------------------------


def stream_through(pieces, env=None):
    r = StreamRedactor(env=env or {})
    return "".join(r.feed(p) for p in pieces) + r.flush()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 64])
def test_a_secret_split_across_pieces_is_masked(size):
    text = (f"The log shows {HF} and {ANT}.\nAuthorization: Bearer abc.def-ghi_123 then "
            "password: hunter2hunter and WANDB_API_KEY=0123abcd4567 end")
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    assert stream_through(pieces) == redact(text, env={})


def test_stream_never_hands_out_the_start_of_a_secret():
    r = StreamRedactor(env={"MY_SERVICE_TOKEN": "svc-0123456789"})
    out = ""
    for piece in ["key ", HF[:5], HF[5:12], HF[12:], " and svc-01", "23456789", " done"]:
        out += r.feed(piece)
        assert "hf_" not in out and "svc-01" not in out and "Qx" not in out, out
    out += r.flush()
    assert out == f"key {MASK} and {MASK} done"


@given(st.lists(st.sampled_from(
    ["a ", "b\n", f" {HF} ", " Bearer ", "tok123456", "password", ": ", "x", " ", "sk-ant-",
     "api03-abcdefghijk", "hf_", "Qx7LmVbRtNw"]), max_size=30), st.integers(1, 9))
def test_stream_matches_redact_of_the_whole_text(parts, size):
    text = "".join(parts)
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    r = StreamRedactor(env={})
    shown = ""
    for p in pieces:
        shown += r.feed(p)
    shown += r.flush()
    assert shown == redact(text, env={})
    assert HF not in shown


# -- structured values, as the store cleans them ---------------------------------------------


def test_values_under_secret_names_are_masked_whole():
    from carl_tui.store.sanitize import clean_value

    cfg = {"learning_rate": 3e-5, "hub_token": "plain-looking-value", "WANDB_API_KEY": "0123",
           "pad_token": "<pad>", "max_new_tokens": 256, "hub_token_unset": None,
           "secrets": {"A": "aaa-value", "B": ["x1", 2]},
           "report_to": "wandb", "note": f"uses {HF}",
           "command": ["python", "train.py", "--hub_token", "plain-value-2", "--lr", "0.1",
                       "--api-key=inline-value", "--max-new-tokens", "128"]}
    assert clean_value(cfg, 0) == {
        "learning_rate": 3e-5, "hub_token": MASK, "WANDB_API_KEY": MASK, "pad_token": "<pad>",
        "max_new_tokens": 256, "hub_token_unset": None,
        "secrets": {"A": MASK, "B": [MASK, 2]},
        "report_to": "wandb", "note": f"uses {MASK}",
        "command": ["python", "train.py", "--hub_token", MASK, "--lr", "0.1",
                    f"--api-key={MASK}", "--max-new-tokens", "128"]}


def test_values_nested_too_deep_are_masked_whole():
    from carl_tui.store.sanitize import clean_value

    deep: object = "plain-looking-value"
    for _ in range(12):
        deep = {"a": [deep]}
    out = clean_value(deep)
    for _ in range(3):  # dicts at depth 0, 2, 4, 6 are walked; at depth 8 masked whole
        out = out["a"][0]
    assert out == {"a": [MASK]}


def test_cached_names_follow_the_environment(monkeypatch):
    from carl_tui.events import RunRef, ScalarBatch
    from carl_tui.store.sanitize import clean_event

    run = RunRef("jsonl", "p", "r", "run zz-later-secret-1")
    batch = ScalarBatch.from_rows(run, [(1, {"loss/zz-later-secret-1": 0.5})])
    monkeypatch.delenv("LATER_TOKEN", raising=False)
    assert clean_event(batch).run.name == "run zz-later-secret-1"  # not a secret yet
    monkeypatch.setenv("LATER_TOKEN", "zz-later-secret-1")
    clean = clean_event(batch)
    assert clean.run.name == f"run {MASK}" and list(clean.columns) == [f"loss/{MASK}"]
