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
        raise FileNotFoundError(
            f"text file {path} {what}; give data.source.path a text file (UTF-8 for level: char)"
        )
    raw = path.read_bytes()
    if cfg.level == "byte":
        return np.frombuffer(raw, np.uint8).astype(np.int32), BYTE_VOCAB
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path} is not UTF-8 text (byte {err.start}: {raw[err.start : err.start + 1]!r}); "
            "give a UTF-8 file, or read it by byte: data.source.level: byte"
        ) from None
    points = np.frombuffer(text.encode("utf-32-le"), "<u4")
    alphabet, tokens = np.unique(points, return_inverse=True)
    if len(alphabet) < 2:
        raise ValueError(
            f"{path} uses {len(alphabet)} distinct character{'s' * (len(alphabet) != 1)}; "
            "next-token prediction needs at least 2"
        )
    return tokens.astype(np.int32), len(alphabet)


def text_split(
    cfg: TextData, eval_fraction: float
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], int]:
    """Training and held-out windows ``(x, y)`` of the file, and the vocabulary's size."""
    tokens, vocab = read_text(cfg)
    n, window = len(tokens), cfg.context + 1
    held = int(round(eval_fraction * n))
    if held < window or n - held < window:
        raise ValueError(
            f"{Path(cfg.path).expanduser()}: {n:,} tokens split {n - held:,} for training and {held:,} held "
            f"out (data.eval_fraction {eval_fraction}); each part needs at least context + 1 = {window} "
            "tokens: give a longer file, a smaller data.source.context or another eval_fraction"
        )
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
    successors, chances = _chain(cfg, rng)
    seqs = np.empty((cfg.examples, cfg.context + 1), np.int64)
    seqs[:, 0] = rng.integers(0, cfg.vocab, cfg.examples)
    for t in range(1, cfg.context + 1):
        now = seqs[:, t - 1]
        pick = (rng.random(cfg.examples)[:, None] >= chances[now]).sum(axis=1)
        seqs[:, t] = successors[now, pick]
    seqs = seqs.astype(np.int32)
    return seqs[:, :-1].copy(), seqs[:, 1:].copy()


def _chain(cfg: SyntheticTokensData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The chain's table, the first draws of :func:`synthetic_tokens`: each token's ``branching``
    successors ``(vocab, branching)``, and the cumulative chances of taking them (the last 1)."""
    successors = rng.integers(0, cfg.vocab, (cfg.vocab, cfg.branching))
    chances = np.cumsum(rng.dirichlet(np.ones(cfg.branching), size=cfg.vocab), axis=1)
    chances[:, -1] = 1.0  # rounding must never leave a draw above every bound
    return successors, chances


def chain(cfg: SyntheticTokensData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The Markov chain that :func:`synthetic_tokens` draws from ``rng`` (given the same Generator,
    in the same state): each token's ``branching`` successors ``(vocab, branching)`` and the
    probability of each, float64 rows summing to 1. A token drawn twice among one token's
    successors is one successor, with both probabilities.

    The probabilities are those the sampler uses: it takes successor ``k`` when a uniform draw
    ``u`` in [0, 1) has ``chances[k - 1] <= u < chances[k]``, so with ``chances[k] - chances[k - 1]``.
    """
    successors, chances = _chain(cfg, rng)
    return successors, np.diff(chances, axis=1, prepend=0.0)


def chain_entropies(successors: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """Each token's next-token entropy H(P(. | s)) in nats, ``(vocab,)``, repeated successors merged."""
    vocab, branching = successors.shape
    order = np.argsort(successors, axis=1, kind="stable")
    tokens = np.take_along_axis(successors, order, axis=1)
    chances = np.take_along_axis(probabilities, order, axis=1)
    new = np.ones_like(tokens, dtype=bool)
    new[:, 1:] = tokens[:, 1:] != tokens[:, :-1]  # the first of each distinct successor of a row
    merged = np.bincount(np.cumsum(new.ravel()) - 1, weights=chances.ravel())
    rows = np.flatnonzero(new.ravel()) // branching
    surprise = -np.log(np.where(merged > 0, merged, 1.0))  # a successor never taken adds nothing
    return np.bincount(rows, weights=merged * surprise, minlength=vocab)


def markov_loss_floor(cfg: SyntheticTokensData, rng: np.random.Generator) -> float:
    """The expected cross-entropy, in nats a token, of the Bayes-optimal predictor of the chain
    that :func:`synthetic_tokens` draws from ``rng``: the least mean next-token loss any model
    can expect on its sequences.

    Position t (0..context - 1) predicts x_{t+1} from x_0..x_t, and the chain makes x_{t+1}
    depend on x_t alone, so its least expected loss is the conditional entropy
    H(x_{t+1} | x_t) = sum_s P(x_t = s) H(P(. | s)), with P(x_0) uniform and
    P(x_{t+1} = j) = sum_s P(x_t = s) P(j | s). The floor is the mean over the ``context``
    positions, as an example's loss is the mean over its positions. Once P(x_t) moves by less
    than 1e-14 (summed over tokens) in a step, it is taken as stationary and the
    remaining positions add the same: a step of the chain never moves two distributions further
    apart, so this changes the floor by less than context x 1e-14 x log(branching).
    """
    successors, probabilities = chain(cfg, rng)
    entropies = chain_entropies(successors, probabilities)
    marginal = np.full(cfg.vocab, 1.0 / cfg.vocab)
    total = 0.0
    for t in range(cfg.context):
        total += float(marginal @ entropies)
        if t == cfg.context - 1:
            break
        following = np.bincount(
            successors.ravel(), weights=(marginal[:, None] * probabilities).ravel(), minlength=cfg.vocab
        )
        if np.abs(following - marginal).sum() <= 1e-14:  # stationary: every later position adds as much
            total += (cfg.context - 1 - t) * float(following @ entropies)
            break
        marginal = following
    return total / cfg.context
