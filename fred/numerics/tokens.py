"""Token sequences for next-token prediction: a user's text file, or a synthetic Markov chain.

An example is a window of ``context`` tokens, ``x = tokens[i : i + context]``, and its labels
are the tokens that follow each position, ``y = tokens[i + 1 : i + context + 1]``: ``x`` and
``y`` are int32 arrays of shape ``(N, context)``.

A text file's windows start every ``context`` tokens (stride = context): they do not overlap,
so an epoch predicts every token of the file once and the data set holds about as many tokens
as the file, not ``context`` times as many. The held-out split is the file's last
``eval_fraction`` of tokens, cut into windows of its own, never windows drawn from the middle:
windows that overlap, or neighbouring passages of one text, share most of their tokens, and a
held-out window among training ones would be evaluated on text the model was trained on.

The synthetic sequences are independent runs of one random sparse Markov chain, so any of
them may be held out (a seeded random ``eval_fraction``, as the other synthetic data).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fred.scenario.schema import SyntheticTokensData, TextData

BYTE_VOCAB = 256


# ----------------------------------------------------------------------------- text files
def read_text(cfg: TextData) -> tuple[np.ndarray, int]:
    """The file's tokens (int32) and the vocabulary's size: its bytes (256), or one token per
    distinct character, numbered in code-point order."""
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise FileNotFoundError(f"text file {path} {what}; give data.source.path a text file (UTF-8 for level: char)")
    raw = path.read_bytes()
    if cfg.level == "byte":
        return np.frombuffer(raw, np.uint8).astype(np.int32), BYTE_VOCAB
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start}: {raw[err.start:err.start + 1]!r}); "
                         "give a UTF-8 file, or read it by byte: data.source.level: byte") from None
    points = np.frombuffer(text.encode("utf-32-le"), "<u4")
    alphabet, tokens = np.unique(points, return_inverse=True)
    if len(alphabet) < 2:
        raise ValueError(f"{path} uses {len(alphabet)} distinct character{'s' * (len(alphabet) != 1)}; "
                         "next-token prediction needs at least 2")
    return tokens.astype(np.int32), len(alphabet)


def text_split(cfg: TextData, eval_fraction: float) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], int]:
    """Training and held-out windows ``(x, y)`` of the file, and the vocabulary's size."""
    tokens, vocab = read_text(cfg)
    n, window = len(tokens), cfg.context + 1
    held = int(round(eval_fraction * n))
    if held < window or n - held < window:
        raise ValueError(f"{Path(cfg.path).expanduser()}: {n:,} tokens split {n - held:,} for training and {held:,} held "
                         f"out (data.eval_fraction {eval_fraction}); each part needs at least context + 1 = {window} "
                         "tokens: give a longer file, a smaller data.source.context or another eval_fraction")
    return windows(tokens[: n - held], cfg.context), windows(tokens[n - held :], cfg.context), vocab


def windows(tokens: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows of ``context`` tokens (stride ``context``) and their next tokens."""
    count = (len(tokens) - 1) // context
    index = np.arange(count)[:, None] * context + np.arange(context)[None, :]
    return tokens[index], tokens[index + 1]


# ----------------------------------------------------------------------------- synthetic
def synthetic_tokens(cfg: SyntheticTokensData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``examples`` independent sequences of one random sparse Markov chain.

    Each token has ``branching`` successors (drawn uniformly, with replacement) taken with
    Dirichlet(1) probabilities of its own; a sequence starts at a uniformly drawn token. The
    next token's entropy is at most log(branching), far below the log(vocab) of a guess.
    """
    successors = rng.integers(0, cfg.vocab, (cfg.vocab, cfg.branching))
    chances = np.cumsum(rng.dirichlet(np.ones(cfg.branching), size=cfg.vocab), axis=1)
    chances[:, -1] = 1.0  # rounding must never leave a draw above every bound
    seqs = np.empty((cfg.examples, cfg.context + 1), np.int64)
    seqs[:, 0] = rng.integers(0, cfg.vocab, cfg.examples)
    for t in range(1, cfg.context + 1):
        now = seqs[:, t - 1]
        pick = (rng.random(cfg.examples)[:, None] >= chances[now]).sum(axis=1)
        seqs[:, t] = successors[now, pick]
    seqs = seqs.astype(np.int32)
    return seqs[:, :-1].copy(), seqs[:, 1:].copy()
