"""B3IT: black-box border-input tracking, change detection of LLM endpoints.

Implements "Token-Efficient Change Detection in LLM APIs" (Chauvin et al., arXiv 2602.11083,
ICML 2026). A *border input* (BI) is a prompt whose first output token at temperature 0 is not
unique: two or more tokens are (near-)tied for the top logit, so batch-variant floating point
makes the endpoint answer with either of them. Any change of the model moves that border and
changes the BI's first-token distribution, which costs one output token per query to observe.

Phase 1 (:func:`find_border_inputs`, :func:`reference_distributions`, :func:`select_balanced`)
finds BIs among short prompts and samples their reference distributions; phase 2 compares new
samples with the reference by the mean total-variation statistic (:func:`tv_statistic`,
:func:`b3it_test`, :func:`null_statistics`) and, in production, runs a sequential rule on the
daily statistic (:func:`detect_changes`, :class:`B3ITMonitor`). :class:`LinearLMEndpoint` is a
simulated endpoint for calibration, tests and demos. Every model-facing function takes a
:data:`~rml_fast.evaluation._protocols.TokenSampler`, ``(prompt, n) -> n first output tokens``.
"""

from __future__ import annotations

import math
import numbers
import statistics
import zlib
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from rml_fast._validation import Interval, check_rng, check_scalar
from rml_fast.evaluation import _b3it_counts as _bc

__all__ = [
    "B3ITMonitor",
    "ChangeEvent",
    "Cost",
    "CountingSampler",
    "LinearLMEndpoint",
    "TestResult",
    "b3it_test",
    "balance_score",
    "detect_changes",
    "detection_auc",
    "find_border_inputs",
    "is_unstable",
    "null_statistics",
    "reference_distributions",
    "select_balanced",
    "tv_statistic",
    "two_sample_statistics",
]


def _int(value: Any, name: str, interval: Interval) -> int:
    return int(check_scalar(value, name, interval))


def _real(value: Any, name: str, interval: Interval) -> float:
    return float(check_scalar(value, name, interval))


_POS_INT = Interval("int", 1, None)
_NONNEG_INT = Interval("int", 0, None)
_NONNEG_REAL = Interval("real", 0.0, None)


# --------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------
def _check_sampler(sampler: Any, name: str = "sampler") -> None:
    if not callable(sampler):
        raise TypeError(
            f"{name} must be a TokenSampler, a callable (prompt, n) -> list of n str, "
            f"got {type(sampler).__name__}"
        )


def _check_prompts(prompts: Any, name: str, *, allow_empty: bool = False) -> list[str]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Iterable):
        raise TypeError(f"{name} must be a sequence of str prompts, got {type(prompts).__name__}")
    out = list(prompts)
    for i, p in enumerate(out):
        if not isinstance(p, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(p).__name__}")
    if not out and not allow_empty:
        raise ValueError(f"{name} must hold at least one prompt, got an empty sequence")
    return out


def _tokens_of(value: Any, name: str) -> list[str]:
    """A prompt's samples: a sequence of str tokens or a Counter of token counts."""
    if isinstance(value, Mapping):
        out = []
        for tok, c in value.items():
            if not isinstance(tok, str):
                raise TypeError(f"{name} keys must be str tokens, got {type(tok).__name__}")
            if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 0:
                raise ValueError(f"{name}[{tok!r}] must be a non-negative int count, got {c!r}")
            out.extend([tok] * int(c))
        return out
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be a sequence of str tokens or a Counter, got {type(value).__name__}"
        )
    out = list(value)
    for i, tok in enumerate(out):
        if not isinstance(tok, str):
            raise TypeError(f"{name}[{i}] must be a str token, got {type(tok).__name__}")
    return out


def _check_samples(
    samples: Any, name: str, *, min_per_prompt: int = 1, allow_empty: bool = False
) -> dict[str, list[str]]:
    """``{prompt: tokens or Counter}`` -> ``{prompt: list of tokens}``, validated."""
    if not isinstance(samples, Mapping):
        raise TypeError(
            f"{name} must be a mapping {{prompt: list of tokens or Counter}}, "
            f"got {type(samples).__name__}"
        )
    if not samples and not allow_empty:
        raise ValueError(f"{name} must hold at least one prompt, got an empty mapping")
    out = {}
    for prompt, value in samples.items():
        if not isinstance(prompt, str):
            raise TypeError(f"{name} keys must be str prompts, got {type(prompt).__name__}")
        toks = _tokens_of(value, f"{name}[{prompt!r}]")
        if len(toks) < min_per_prompt:
            raise ValueError(
                f"{name}[{prompt!r}] must hold at least {min_per_prompt} samples, got {len(toks)}"
            )
        out[prompt] = toks
    return out


def _check_counts_matrix(x: Any, name: str) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        raise TypeError(f"{name} must be a NumPy array-like, got a torch tensor; call .numpy()")
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real counts, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a (P, V) count matrix, got shape {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got NaN or infinite values")
    if (arr < 0).any():
        raise ValueError(f"{name} must be non-negative counts, got a negative entry")
    empty = np.flatnonzero(arr.sum(axis=1) <= 0)
    if empty.size:
        raise ValueError(f"{name} row {int(empty[0])} has no samples (its counts sum to 0)")
    return arr


# --------------------------------------------------------------------------------------------
# cost accounting
# --------------------------------------------------------------------------------------------
@dataclass
class Cost:
    """Queries spent on an endpoint.

    Attributes
    ----------
    requests : int
        Number of API requests; every first-token sample is one request (``max_tokens=1``).
    input_tokens : int
        Prompt tokens billed, summed over requests.
    output_tokens : int
        Output tokens billed (one per request).

    Examples
    --------
    >>> c = Cost(requests=3, input_tokens=6, output_tokens=3)
    >>> c.tokens, (c + c).requests
    (9, 6)
    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def tokens(self) -> int:
        """Input plus output tokens.

        Examples
        --------
        >>> Cost(1, 2, 1).tokens
        3
        """
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Cost) -> Cost:
        """Sum of two costs.

        Examples
        --------
        >>> (Cost(1, 2, 1) + Cost(2, 2, 2)).tokens
        7
        """
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )


def _input_tokens(count_tokens, prompt: str) -> int:
    if count_tokens is None:
        return max(1, len(prompt.split()))
    k = count_tokens(prompt)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise ValueError(f"count_tokens({prompt!r}) must return a non-negative int, got {k!r}")
    return int(k)


class CountingSampler:
    """A :data:`TokenSampler` wrapper that counts requests and tokens.

    Each of the ``n`` samples of a call ``sampler(prompt, n)`` is counted as one request of
    ``count_tokens(prompt)`` input tokens and one output token. The wrapper also checks that the
    wrapped sampler returns ``n`` str tokens.

    Parameters
    ----------
    sampler : TokenSampler
        ``(prompt, n) -> list of n first output tokens`` at temperature 0.
    count_tokens : callable str -> int, optional
        Input tokens of a prompt (an API tokenizer); default: its number of whitespace-separated
        words, at least 1.

    Attributes
    ----------
    cost : Cost
        Running totals; reset with :meth:`reset`.

    Examples
    --------
    >>> s = CountingSampler(lambda prompt, n: ["a"] * n)
    >>> s("hello world", 3)
    ['a', 'a', 'a']
    >>> s.cost
    Cost(requests=3, input_tokens=6, output_tokens=3)
    """

    def __init__(self, sampler: Callable[[str, int], list[str]], count_tokens=None) -> None:
        _check_sampler(sampler)
        if count_tokens is not None and not callable(count_tokens):
            raise TypeError(
                f"count_tokens must be a callable str -> int or None, got {type(count_tokens)}"
            )
        self.sampler = sampler
        self.count_tokens = count_tokens
        self.cost = Cost()

    def __call__(self, prompt: str, n: int) -> list[str]:
        """Sample ``n`` first tokens of ``prompt`` and count the cost.

        Parameters
        ----------
        prompt : str
        n : int
            Number of samples (requests), >= 1.

        Returns
        -------
        tokens : list of n str

        Examples
        --------
        >>> CountingSampler(lambda p, n: ["x"] * n)("p", 2)
        ['x', 'x']
        """
        n = _int(n, "n", _POS_INT)
        out = list(self.sampler(prompt, n))
        if len(out) != n or not all(isinstance(t, str) for t in out):
            raise ValueError(
                f"sampler({prompt!r}, {n}) must return a list of {n} str tokens, got {out[:5]!r}"
            )
        self.cost = self.cost + Cost(n, n * _input_tokens(self.count_tokens, prompt), n)
        return out

    def reset(self) -> Cost:
        """Return the cost so far and restart the count at zero.

        Returns
        -------
        cost : Cost

        Examples
        --------
        >>> s = CountingSampler(lambda p, n: ["x"] * n)
        >>> _ = s("p", 2)
        >>> s.reset().requests, s.cost.requests
        (2, 0)
        """
        out, self.cost = self.cost, Cost()
        return out


# --------------------------------------------------------------------------------------------
# simulated endpoint
# --------------------------------------------------------------------------------------------
class LinearLMEndpoint:
    """A simulated LLM endpoint: a random linear "LM" read out at temperature 0 with jitter.

    The prompt is split on whitespace; a word of :attr:`vocabulary` is that token, any other word
    is hashed to one (CRC32 modulo ``vocab_size``). The logits of the first output token are

        l(x) = b + sum_{k < context} W[k, x_{-1-k}],   W[k] in R^{V x V}, b in R^V,

    with ``W, b ~ N(0, weight_scale^2)`` drawn from ``seed``; each query adds fresh
    ``N(0, jitter^2)`` noise to every logit (the batch-variant floating point of a real server)
    and returns the argmax token. Prompts whose top-2 logit gap is within a few ``jitter`` are
    border inputs. :meth:`changed` returns a copy with Gaussian weight noise of scale ``s`` (the
    paper's TinyChange noise variant); a model swap is an endpoint of another ``seed``.

    Parameters
    ----------
    vocab_size : int, default=64
        Input and output vocabulary size ``V``; tokens are ``"t00"``, ``"t01"``, ...
    context : int, default=2
        Number of trailing prompt words the logits depend on.
    weight_scale : float, default=0.1
        Standard deviation of the weights (with ``jitter=1e-3``, about 2% of the
        ``V**context`` prompts of :meth:`candidate_prompts` show two tokens in 3 queries).
    jitter : float, default=1e-3
        Standard deviation ``sigma`` of the per-query logit noise.
    seed : int, default=0
        Seed of the weights.
    rng : numpy Generator, int or None, default=None
        Stream of the jitter noise; None derives it from ``seed`` (fully reproducible).

    Examples
    --------
    >>> ep = LinearLMEndpoint(seed=0)
    >>> len(ep.candidate_prompts()), ep("t01 t02", 3)
    (4096, ['t23', 't23', 't23'])
    """

    def __init__(
        self,
        vocab_size: int = 64,
        context: int = 2,
        weight_scale: float = 0.1,
        jitter: float = 1e-3,
        seed: int = 0,
        rng=None,
    ) -> None:
        vocab_size = _int(vocab_size, "vocab_size", Interval("int", 2, None))
        context = _int(context, "context", _POS_INT)
        weight_scale = _real(weight_scale, "weight_scale", Interval("real", 0, None, "neither"))
        jitter = _real(jitter, "jitter", _NONNEG_REAL)
        seed = _int(seed, "seed", _NONNEG_INT)
        w_seq, j_seq = np.random.SeedSequence(seed).spawn(2)
        gen = np.random.default_rng(w_seq)
        self.vocab_size = vocab_size
        self.context = context
        self.weight_scale = weight_scale
        self.jitter = jitter
        self.seed = seed
        self.weights = gen.normal(0.0, weight_scale, (context, vocab_size, vocab_size))
        self.bias = gen.normal(0.0, weight_scale, vocab_size)
        self._rng = np.random.default_rng(j_seq) if rng is None else check_rng(rng)
        self._vocab = tuple(f"t{i:0{len(str(vocab_size - 1))}d}" for i in range(vocab_size))
        self._index = {t: i for i, t in enumerate(self._vocab)}

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The token strings, index ``i`` -> ``"t{i}"`` (zero-padded).

        Examples
        --------
        >>> LinearLMEndpoint(vocab_size=12).vocabulary[:3]
        ('t00', 't01', 't02')
        """
        return self._vocab

    def _ids(self, prompt: str) -> list[int]:
        words = prompt.split()[-self.context :] if self.context else []
        return [
            self._index[w] if w in self._index else zlib.crc32(w.encode()) % self.vocab_size
            for w in words
        ]

    def logits(self, prompt: str) -> np.ndarray:
        """Noise-free first-token logits of ``prompt``.

        Parameters
        ----------
        prompt : str

        Returns
        -------
        logits : ndarray of shape (vocab_size,), float64

        Examples
        --------
        >>> LinearLMEndpoint(seed=0).logits("t01 t02").shape
        (64,)
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        out = self.bias.copy()
        for k, i in enumerate(reversed(self._ids(prompt))):
            out += self.weights[k, i]
        return out

    def top2_gap(self, prompt: str) -> float:
        """Gap between the two largest noise-free logits (a border input when ~ ``jitter``).

        Parameters
        ----------
        prompt : str

        Returns
        -------
        gap : float, >= 0

        Examples
        --------
        >>> LinearLMEndpoint(seed=0).top2_gap("t01 t02") > 0
        True
        """
        top = np.sort(self.logits(prompt))[-2:]
        return float(top[1] - top[0])

    def __call__(self, prompt: str, n: int) -> list[str]:
        """Sample ``n`` first output tokens of ``prompt`` at temperature 0 (the TokenSampler).

        Parameters
        ----------
        prompt : str
        n : int, >= 1

        Returns
        -------
        tokens : list of n str

        Examples
        --------
        >>> LinearLMEndpoint(seed=0)("t01 t02", 2)
        ['t23', 't23']
        """
        n = _int(n, "n", _POS_INT)
        z = self.logits(prompt)[None, :] + self._rng.normal(0.0, self.jitter, (n, self.vocab_size))
        return [self._vocab[i] for i in z.argmax(axis=1)]

    def candidate_prompts(self) -> list[str]:
        """All ``vocab_size ** context`` prompts of ``context`` vocabulary words.

        Returns
        -------
        prompts : list of str, in lexicographic order of token indices

        Examples
        --------
        >>> LinearLMEndpoint(vocab_size=4, context=1).candidate_prompts()
        ['t0', 't1', 't2', 't3']
        """
        idx = np.indices((self.vocab_size,) * self.context).reshape(self.context, -1).T
        return [" ".join(self._vocab[i] for i in row) for row in idx]

    def changed(self, scale: float, seed: int = 1, rng=None) -> LinearLMEndpoint:
        """A copy whose weights and bias get ``N(0, scale^2)`` noise (the TinyChange variant).

        Parameters
        ----------
        scale : float, >= 0
            Noise standard deviation ``s``; 0 gives an unchanged copy (fresh jitter stream).
        seed : int, default=1
            Seed of the weight noise.
        rng : numpy Generator, int or None
            Jitter stream of the copy; None derives it from ``seed``.

        Returns
        -------
        endpoint : LinearLMEndpoint

        Examples
        --------
        >>> ep = LinearLMEndpoint(seed=0)
        >>> bool(abs(ep.changed(0.5).logits("t01") - ep.logits("t01")).max() > 0.1)
        True
        """
        scale = _real(scale, "scale", _NONNEG_REAL)
        seed = _int(seed, "seed", _NONNEG_INT)
        out = LinearLMEndpoint.__new__(LinearLMEndpoint)
        out.__dict__.update(self.__dict__)
        noise_seq, jitter_seq = np.random.SeedSequence([seed, 0xB317]).spawn(2)
        gen = np.random.default_rng(noise_seq)
        out.weights = self.weights + gen.normal(0.0, 1.0, self.weights.shape) * scale
        out.bias = self.bias + gen.normal(0.0, 1.0, self.bias.shape) * scale
        out._rng = np.random.default_rng(jitter_seq) if rng is None else check_rng(rng)
        return out


# --------------------------------------------------------------------------------------------
# phase 1: discovery and reference
# --------------------------------------------------------------------------------------------
def _progress(iterable, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc)


def find_border_inputs(
    sampler: Callable[[str, int], list[str]],
    candidates: Sequence[str],
    queries_per_input: int = 3,
    target: int = 50,
    max_candidates: int = 5000,
    rng=None,
    progress: bool = True,
) -> list[str]:
    """Phase 1: find border inputs among candidate prompts by black-box sampling.

    Candidates are tried in a random order; each is queried ``queries_per_input`` times (q1=3 in
    the paper) and is a border input when at least two distinct first tokens come back. The
    search stops after ``target`` BIs or ``max_candidates`` candidates (5000 in production).

    Parameters
    ----------
    sampler : TokenSampler
        ``(prompt, n) -> n`` first output tokens at temperature 0.
    candidates : sequence of str
        Candidate prompts (single tokens of the tokenizer vocabulary in the paper).
    queries_per_input : int, default=3
        Queries per candidate, >= 2.
    target : int, default=50
        Number of BIs after which the search stops.
    max_candidates : int, default=5000
        Most candidates tried.
    rng : numpy Generator, int or None
        Order in which the candidates are tried.
    progress : bool, default=True
        Show a tqdm progress bar (on stderr).

    Returns
    -------
    border_inputs : list of str
        In discovery order; at most ``target``. Cost: ``queries_per_input`` requests per
        candidate tried.

    Examples
    --------
    >>> ep = LinearLMEndpoint(seed=0)
    >>> bis = find_border_inputs(ep, ep.candidate_prompts(), target=5, rng=0, progress=False)
    >>> len(bis), all(ep.top2_gap(p) < 0.01 for p in bis)
    (5, True)
    """
    _check_sampler(sampler)
    cands = _check_prompts(candidates, "candidates")
    q = _int(queries_per_input, "queries_per_input", Interval("int", 2, None))
    target = _int(target, "target", _POS_INT)
    max_candidates = _int(max_candidates, "max_candidates", _POS_INT)
    gen = check_rng(rng)
    order = gen.permutation(len(cands))[:max_candidates]
    found: list[str] = []
    for i in _progress(order, len(order), "B3IT discovery", progress):
        prompt = cands[int(i)]
        if len(set(sampler(prompt, q))) >= 2:
            found.append(prompt)
            if len(found) >= target:
                break
    return found


def reference_distributions(
    sampler: Callable[[str, int], list[str]],
    prompts: Sequence[str],
    n_samples: int = 100,
    progress: bool = True,
) -> dict[str, Counter]:
    """Sample each prompt ``n_samples`` times: the reference first-token distributions.

    Parameters
    ----------
    sampler : TokenSampler
    prompts : sequence of str
        Border inputs (R=100 samples each in production, 50 in-vitro).
    n_samples : int, default=100
    progress : bool, default=True

    Returns
    -------
    reference : dict str -> Counter
        ``{prompt: Counter(token -> count)}``, counts summing to ``n_samples``.

    Examples
    --------
    >>> sampler = lambda p, n: ["a", "b"] * (n // 2)
    >>> ref = reference_distributions(sampler, ["x"], n_samples=4, progress=False)
    >>> ref["x"]
    Counter({'a': 2, 'b': 2})
    """
    _check_sampler(sampler)
    ps = _check_prompts(prompts, "prompts")
    n = _int(n_samples, "n_samples", _POS_INT)
    return {p: Counter(sampler(p, n)) for p in _progress(ps, len(ps), "B3IT reference", progress)}


def balance_score(counts: Mapping[str, int]) -> float:
    """Balance of a first-token distribution: ``c2 / c1``, second over first largest count.

    Parameters
    ----------
    counts : Counter or mapping str -> int

    Returns
    -------
    score : float in [0, 1]; 0 when a single token was seen.

    Examples
    --------
    >>> balance_score(Counter({"a": 60, "b": 30, "c": 10}))
    0.5
    """
    if not isinstance(counts, Mapping):
        raise TypeError(f"counts must be a Counter/mapping of token counts, got {type(counts)}")
    c = sorted((v for v in counts.values() if v > 0), reverse=True)
    return c[1] / c[0] if len(c) > 1 else 0.0


def select_balanced(ref: Mapping[str, Mapping[str, int]], k: int = 20) -> list[str]:
    """The ``k`` prompts of largest :func:`balance_score` (top_k=20 in production).

    Ties keep the order of ``ref`` (a stable sort, as in the reference monitor).

    Parameters
    ----------
    ref : mapping str -> Counter
        Reference distributions from :func:`reference_distributions`.
    k : int, default=20

    Returns
    -------
    prompts : list of str, most balanced first, ``min(k, len(ref))`` of them

    Examples
    --------
    >>> ref = {"a": Counter(x=9, y=1), "b": Counter(x=5, y=5), "c": Counter(x=10)}
    >>> select_balanced(ref, k=2)
    ['b', 'a']
    """
    if not isinstance(ref, Mapping):
        raise TypeError(f"ref must be a mapping {{prompt: Counter}}, got {type(ref).__name__}")
    k = _int(k, "k", _POS_INT)
    scores = {p: balance_score(c) for p, c in ref.items()}
    return sorted(ref, key=lambda p: scores[p], reverse=True)[:k]


# --------------------------------------------------------------------------------------------
# statistic and tests
# --------------------------------------------------------------------------------------------
def tv_statistic(ref_counts, new_counts) -> float:
    """B3IT statistic: mean over prompts of the total-variation distance of two count matrices.

    ``T = (1/P) sum_x TV(P_ref(.|x), P_new(.|x))`` with ``TV(p, q) = 1/2 sum_y |p(y) - q(y)|``,
    each row normalised to a distribution.

    Parameters
    ----------
    ref_counts, new_counts : array-like of shape (P, V)
        Non-negative token counts, one row per prompt over a shared per-row vocabulary (pad
        unused columns with 0); every row must hold at least one sample.

    Returns
    -------
    statistic : float in [0, 1]

    Examples
    --------
    >>> tv_statistic([[5, 5], [10, 0]], [[10, 0], [0, 10]])
    0.75
    """
    a = _check_counts_matrix(ref_counts, "ref_counts")
    b = _check_counts_matrix(new_counts, "new_counts")
    if a.shape != b.shape:
        raise ValueError(
            f"ref_counts and new_counts must have the same shape (P, V), got {a.shape} and {b.shape}"
        )
    return float(_bc.mean_tv(a, b))


class TestResult(NamedTuple):
    """Result of :func:`b3it_test`.

    Attributes
    ----------
    statistic : float
        Mean TV statistic.
    pvalue : float
        Permutation p-value (NaN when ``n_permutations=0``).
    """

    statistic: float
    pvalue: float


setattr(TestResult, "__test__", False)  # noqa: B010 -- not a pytest test class, despite its name


def b3it_test(ref_samples, new_samples, n_permutations: int = 1000, rng=None) -> TestResult:
    """Two-sample B3IT test of "same endpoint" on border-input samples.

    The statistic is :func:`tv_statistic` of the per-prompt counts. The p-value is a permutation
    p-value **[PROPOSAL]** (stubbed in the reference repository): for each prompt both samples
    are pooled and reassigned at random into groups of the original sizes, independently across
    prompts, ``B = n_permutations`` times (drawn as multivariate hypergeometric counts, the
    exact law of such a reassignment), and ``p = (1 + #{T_b >= T}) / (B + 1)``, which is a
    valid level-alpha test under exchangeability (the null of an unchanged endpoint).

    Parameters
    ----------
    ref_samples, new_samples : mapping str -> sequence of str or Counter
        First tokens per prompt; both must have the same prompts, each with >= 1 sample.
    n_permutations : int, default=1000
        0 skips the p-value (NaN).
    rng : numpy Generator, int or None

    Returns
    -------
    result : TestResult
        ``(statistic, pvalue)``.

    Examples
    --------
    >>> ref = {"x": ["a"] * 50 + ["b"] * 50}
    >>> res = b3it_test(ref, {"x": ["c"] * 10}, n_permutations=99, rng=0)
    >>> res.statistic, res.pvalue
    (1.0, 0.01)
    """
    ref = _check_samples(ref_samples, "ref_samples")
    new = _check_samples(new_samples, "new_samples")
    if set(ref) != set(new):
        missing = sorted(set(ref) ^ set(new))[:5]
        raise ValueError(
            f"ref_samples and new_samples must have the same prompts; these are in only one: "
            f"{missing}"
        )
    b = _int(n_permutations, "n_permutations", _NONNEG_INT)
    gen = check_rng(rng)
    prompts = list(ref)
    (codes_ref, codes_new), n_bins = _bc.encode(
        [[ref[p] for p in prompts], [new[p] for p in prompts]]
    )
    c1 = _bc.counts(_bc.pad(codes_ref)[0], n_bins)
    c2 = _bc.counts(_bc.pad(codes_new)[0], n_bins)
    stat = float(_bc.mean_tv(c1, c2))
    if b == 0:
        return TestResult(stat, math.nan)
    perm = _bc.permutation_statistics(c1, c2, b, gen)
    exceed = int(np.count_nonzero(perm >= stat - 1e-12))
    return TestResult(stat, (1 + exceed) / (b + 1))


def _resplit_args(n_prompts, ref_per_prompt, det_per_prompt, n_tests, pool_size):
    n_prompts = _int(n_prompts, "n_prompts", _POS_INT)
    ref_per_prompt = _int(ref_per_prompt, "ref_per_prompt", _POS_INT)
    det_per_prompt = _int(det_per_prompt, "det_per_prompt", _POS_INT)
    n_tests = _int(n_tests, "n_tests", _NONNEG_INT)
    if n_prompts > pool_size:
        raise ValueError(
            f"n_prompts must be at most the number of prompts in the samples ({pool_size}), "
            f"got {n_prompts}"
        )
    return n_prompts, ref_per_prompt, det_per_prompt, n_tests


def null_statistics(
    samples,
    n_prompts: int,
    ref_per_prompt: int,
    det_per_prompt: int,
    n_tests: int = 1000,
    rng=None,
) -> np.ndarray:
    """Statistics of ``n_tests`` unchanged-vs-unchanged resplits (the in-vitro null).

    Each test draws ``n_prompts`` distinct prompts of ``samples`` and, for each, a uniformly
    random ``ref_per_prompt + det_per_prompt`` of its samples without replacement, the first
    ``ref_per_prompt`` as reference and the rest as detection samples, and computes
    :func:`tv_statistic`. All tests are computed as one ``(n_tests, P, V)`` count tensor per
    chunk of 256 tests (vectorised NumPy), not a Python loop per test.

    Parameters
    ----------
    samples : mapping str -> sequence of str or Counter
        First tokens of one (unchanged) endpoint per prompt; each prompt must hold at least
        ``ref_per_prompt + det_per_prompt`` samples.
    n_prompts : int
        Prompts per test (the paper sweeps 1, 3, 5, 10).
    ref_per_prompt, det_per_prompt : int
        Reference and detection samples per prompt (50 and 1..50 in the paper).
    n_tests : int, default=1000
    rng : numpy Generator, int or None

    Returns
    -------
    statistics : ndarray of shape (n_tests,), float64

    Examples
    --------
    >>> s = {"x": ["a"] * 30 + ["b"] * 30, "y": ["c"] * 60}
    >>> t = null_statistics(s, n_prompts=2, ref_per_prompt=40, det_per_prompt=10, n_tests=5, rng=0)
    >>> t.shape, bool(((t >= 0) & (t <= 0.5)).all())
    ((5,), True)
    """
    pool = _check_samples(samples, "samples")
    n_prompts, n_ref, n_det, n_tests = _resplit_args(
        n_prompts, ref_per_prompt, det_per_prompt, n_tests, len(pool)
    )
    short = [p for p, t in pool.items() if len(t) < n_ref + n_det]
    if short:
        raise ValueError(
            f"samples[{short[0]!r}] must hold at least ref_per_prompt + det_per_prompt = "
            f"{n_ref + n_det} samples, got {len(pool[short[0]])}"
        )
    gen = check_rng(rng)
    (codes,), n_bins = _bc.encode([list(pool.values())])
    padded, lengths = _bc.pad(codes)
    draws = _bc.resplit_draws(gen, lengths, None, n_prompts, n_ref, n_det, n_tests)
    return _bc.resplit_statistics(padded, None, n_bins, draws)


def two_sample_statistics(
    ref_samples,
    new_samples,
    n_prompts: int,
    ref_per_prompt: int,
    det_per_prompt: int,
    n_tests: int = 1000,
    rng=None,
) -> np.ndarray:
    """Statistics of ``n_tests`` reference-vs-new tests drawn from two sample pools (H1 side).

    As :func:`null_statistics`, but the reference samples of each test come from
    ``ref_samples`` and the detection samples from ``new_samples`` (e.g. a changed endpoint),
    each drawn without replacement; with :func:`null_statistics` this gives the ROC AUC of the
    in-vitro experiments (:func:`detection_auc`).

    Parameters
    ----------
    ref_samples, new_samples : mapping str -> sequence of str or Counter
        Same prompts; ``ref_samples`` with >= ``ref_per_prompt`` and ``new_samples`` with
        >= ``det_per_prompt`` samples per prompt.
    n_prompts, ref_per_prompt, det_per_prompt, n_tests, rng
        As in :func:`null_statistics`.

    Returns
    -------
    statistics : ndarray of shape (n_tests,), float64

    Examples
    --------
    >>> ref = {"x": ["a"] * 50 + ["b"] * 50}
    >>> two_sample_statistics(ref, {"x": ["c"] * 20}, 1, 50, 10, n_tests=3, rng=0)
    array([1., 1., 1.])
    """
    ref = _check_samples(ref_samples, "ref_samples")
    new = _check_samples(new_samples, "new_samples")
    if set(ref) != set(new):
        raise ValueError("ref_samples and new_samples must have the same prompts")
    n_prompts, n_ref, n_det, n_tests = _resplit_args(
        n_prompts, ref_per_prompt, det_per_prompt, n_tests, len(ref)
    )
    for name, pool, need, arg in (("ref_samples", ref, n_ref, "ref_per_prompt"),
                                  ("new_samples", new, n_det, "det_per_prompt")):
        short = [p for p, t in pool.items() if len(t) < need]
        if short:
            raise ValueError(
                f"{name}[{short[0]!r}] must hold at least {arg}={need} samples, got "
                f"{len(pool[short[0]])}"
            )
    gen = check_rng(rng)
    prompts = list(ref)
    (c_ref, c_new), n_bins = _bc.encode([[ref[p] for p in prompts], [new[p] for p in prompts]])
    p_ref, l_ref = _bc.pad(c_ref)
    p_new, l_new = _bc.pad(c_new)
    draws = _bc.resplit_draws(gen, l_ref, l_new, n_prompts, n_ref, n_det, n_tests)
    return _bc.resplit_statistics(p_ref, p_new, n_bins, draws)


def detection_auc(null_stats, alt_stats) -> float:
    """ROC AUC of a statistic: ``P(T_alt > T_null) + 1/2 P(T_alt = T_null)`` (Mann-Whitney).

    Parameters
    ----------
    null_stats, alt_stats : array-like of shape (n0,), (n1,)
        Statistics under H0 (e.g. :func:`null_statistics`) and H1 (:func:`two_sample_statistics`).

    Returns
    -------
    auc : float in [0, 1]; 0.5 is chance.

    Examples
    --------
    >>> detection_auc([0.1, 0.2], [0.2, 0.3])
    0.875
    """
    a = np.asarray(null_stats, dtype=np.float64).ravel()
    b = np.asarray(alt_stats, dtype=np.float64).ravel()
    for name, x in (("null_stats", a), ("alt_stats", b)):
        if x.size == 0:
            raise ValueError(f"{name} must be non-empty")
        if not np.isfinite(x).all():
            raise ValueError(f"{name} must be finite")
    a.sort()
    below = np.searchsorted(a, b, side="left")
    at_or_below = np.searchsorted(a, b, side="right")
    return float((below + at_or_below).sum() / (2.0 * a.size * b.size))


# --------------------------------------------------------------------------------------------
# sequential rule (production monitor)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChangeEvent:
    """A change flagged by the sequential rule.

    Attributes
    ----------
    onset : hashable
        Timestamp of the first of the ``persistence`` consecutive deviating days (the event's
        date).
    detected_at : hashable
        Timestamp of the day that completed the streak.
    value : float
        The statistic on the onset day.
    baseline_mean, baseline_std : float
        Trailing baseline of the onset day.
    """

    onset: Hashable
    detected_at: Hashable
    value: float
    baseline_mean: float
    baseline_std: float


@dataclass
class _Detector:
    """Streaming form of the sequential rule; :func:`detect_changes` replays a series through it."""

    window: int
    exclusion: int
    min_baseline: int
    sigma_k: float
    abs_delta: float
    persistence: int
    cooldown: int
    timestamps: list = field(default_factory=list)
    values: list = field(default_factory=list)
    baselines: list = field(default_factory=list)
    streak: int = 0
    last_event: int | None = None

    def update(self, timestamp: Hashable, value: float) -> ChangeEvent | None:
        i = len(self.values)
        self.timestamps.append(timestamp)
        self.values.append(value)
        hi = max(0, i - self.exclusion)  # causal: the reference's negative slice looks ahead
        base = self.values[max(0, i - self.exclusion - self.window) : hi]
        if len(base) < self.min_baseline:
            self.baselines.append((math.nan, math.nan))
            return None
        mean = statistics.fmean(base)
        sd = statistics.stdev(base)
        self.baselines.append((mean, sd))
        dev = abs(value - mean)
        self.streak = self.streak + 1 if (dev > self.abs_delta and dev > self.sigma_k * sd) else 0
        if self.streak != self.persistence:
            return None
        onset = i - self.persistence + 1
        if self.last_event is not None and onset - self.last_event < self.cooldown:
            return None
        self.last_event = onset
        return ChangeEvent(
            self.timestamps[onset], timestamp, self.values[onset], *self.baselines[onset]
        )


_RULE = {
    "window": _POS_INT,
    "exclusion": _NONNEG_INT,
    "min_baseline": Interval("int", 2, None),
    "sigma_k": _NONNEG_REAL,
    "abs_delta": _NONNEG_REAL,
    "persistence": _POS_INT,
    "cooldown": _NONNEG_INT,
}


def _make_detector(**params) -> _Detector:
    p = {k: check_scalar(params[k], k, c) for k, c in _RULE.items()}
    if p["min_baseline"] > p["window"]:
        raise ValueError(
            f"min_baseline must be at most window ({p['window']}), got {p['min_baseline']}"
        )
    return _Detector(
        window=int(p["window"]),
        exclusion=int(p["exclusion"]),
        min_baseline=int(p["min_baseline"]),
        sigma_k=float(p["sigma_k"]),
        abs_delta=float(p["abs_delta"]),
        persistence=int(p["persistence"]),
        cooldown=int(p["cooldown"]),
    )


def _check_series(series: Any) -> list[tuple[Hashable, float]]:
    if isinstance(series, (str, bytes)) or not isinstance(series, Iterable):
        raise TypeError(f"series must be a sequence of (timestamp, value), got {type(series)}")
    out = []
    for i, item in enumerate(series):
        try:
            ts, v = item
        except (TypeError, ValueError):
            raise TypeError(
                f"series[{i}] must be a (timestamp, value) pair, got {item!r}"
            ) from None
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"series[{i}] value must be a finite real number, got {v!r}")
        out.append((ts, float(v)))
    return out


def detect_changes(
    series: Sequence[tuple[Hashable, float]],
    window: int = 14,
    exclusion: int = 4,
    min_baseline: int = 5,
    sigma_k: float = 4.0,
    abs_delta: float = 0.2,
    persistence: int = 3,
    cooldown: int = 10,
) -> list[Hashable]:
    """Production sequential rule on a daily statistic series; returns the events' onset dates.

    For day ``i`` the baseline is the values of days ``[i - exclusion - window, i - exclusion)``
    (needs ``>= min_baseline`` of them, else the day is skipped). The day deviates when
    ``|v_i - mean| > abs_delta`` and ``|v_i - mean| > sigma_k * sd`` (sample standard
    deviation). An event fires when ``persistence`` consecutive days deviate, dated at the first
    of them (the onset), unless its onset is fewer than ``cooldown`` days after the previous
    event's onset. The rule is causal: unlike the reference code, days ``i < exclusion`` have an
    empty baseline rather than one sliced from the end of the series.

    Parameters
    ----------
    series : sequence of (timestamp, value)
        In time order, e.g. the daily mean TV against the reference.
    window, exclusion, min_baseline, sigma_k, abs_delta, persistence, cooldown
        The production configuration by default (14, 4, 5, 4.0, 0.2, 3, 10).

    Returns
    -------
    onsets : list of timestamps

    Examples
    --------
    >>> v = [0.10, 0.12] * 10 + [0.8] * 5
    >>> detect_changes([(f"day{i}", x) for i, x in enumerate(v)])
    ['day20']
    """
    det = _make_detector(
        window=window,
        exclusion=exclusion,
        min_baseline=min_baseline,
        sigma_k=sigma_k,
        abs_delta=abs_delta,
        persistence=persistence,
        cooldown=cooldown,
    )
    events = [det.update(ts, v) for ts, v in _check_series(series)]
    return [e.onset for e in events if e is not None]


def is_unstable(
    series: Sequence[tuple[Hashable, float]], window: int = 14, threshold: float = 0.4
) -> bool:
    """Whether an endpoint is too noisy to monitor: median of the last ``window`` values >= threshold.

    Parameters
    ----------
    series : sequence of (timestamp, value)
    window : int, default=14
    threshold : float, default=0.4

    Returns
    -------
    unstable : bool (False for an empty series)

    Examples
    --------
    >>> is_unstable([(i, 0.5) for i in range(20)]), is_unstable([(i, 0.1) for i in range(20)])
    (True, False)
    """
    s = _check_series(series)
    window = _int(window, "window", _POS_INT)
    threshold = _real(threshold, "threshold", Interval("real", None, None))
    if not s:
        return False
    return statistics.median(v for _, v in s[-window:]) >= threshold


# --------------------------------------------------------------------------------------------
# online monitor
# --------------------------------------------------------------------------------------------
class B3ITMonitor:
    """Online B3IT monitoring of one endpoint: discovery, reference, then one batch per step.

    :meth:`fit` runs phase 1 against a sampler (:func:`find_border_inputs`,
    :func:`reference_distributions` with ``reference_samples`` each, then the ``top_k`` most
    balanced, :func:`select_balanced`), or takes a recorded reference batch. Each :meth:`step`
    gets a batch (sampled here from a sampler, ``samples_per_step`` per BI, or a batch of
    samples that arrived from elsewhere), appends its mean TV against the reference to
    :attr:`series_` and runs the sequential rule of :func:`detect_changes` on it incrementally;
    a new event is appended to :attr:`events_` and passed to ``on_event``. Every query made
    through the monitor is counted in :attr:`cost_` (and per phase in :attr:`cost_by_phase_`).

    Parameters
    ----------
    queries_per_input, target, max_candidates
        Discovery, as in :func:`find_border_inputs` (3, 50, 5000).
    reference_samples : int, default=100
        Reference samples per BI.
    top_k : int, default=20
        BIs kept (most balanced).
    min_bis : int, default=10
        Fewest BIs an endpoint needs; :meth:`fit` raises ``RuntimeError`` below it.
    samples_per_step : int, default=10
        Samples per BI per monitoring step (one step = ``top_k * samples_per_step`` requests).
    window, exclusion, min_baseline, sigma_k, abs_delta, persistence, cooldown
        The sequential rule, as in :func:`detect_changes`.
    instability_window, instability_threshold : int, float, default=14, 0.4
        :attr:`unstable_` when the median of the last ``instability_window`` values is at least
        ``instability_threshold``.
    reinitialize : {"never", "event"}, default="never"
        "never": the reference is the fitted (epoch) reference. "event": after an event
        detected in a step that was given a sampler, the monitor re-runs :meth:`fit` with it and
        restarts the series (a batch-fed monitor sets :attr:`needs_refit_` instead).
    on_event : callable ChangeEvent -> None, optional
        Called once per new event.
    count_tokens : callable str -> int, optional
        Input tokens of a prompt, for :attr:`cost_` (default: whitespace words).
    progress : bool, default=True
        Progress bars during :meth:`fit`.
    rng : numpy Generator, int or None
        Order in which discovery tries the candidates.

    Attributes
    ----------
    border_inputs_ : list of str
        BIs found by discovery (empty when fitted from a reference batch).
    prompts_ : list of str
        The monitored (most balanced) BIs.
    reference_ : dict str -> Counter
        Reference distribution of each monitored BI.
    series_ : list of (timestamp, float)
        Mean TV of every step since the last (re)fit.
    events_ : list of ChangeEvent
        Every event so far.
    cost_ : Cost
        Requests and tokens spent through the monitor.
    cost_by_phase_ : dict str -> Cost
        ``"discovery"``, ``"reference"`` and ``"monitoring"``.
    needs_refit_ : bool
        An event asked for re-initialisation that could not be done (batch-fed step).

    Examples
    --------
    >>> ep = LinearLMEndpoint(seed=0)
    >>> mon = B3ITMonitor(progress=False, rng=0).fit(ep, ep.candidate_prompts())
    >>> values = [mon.step(ep, day) for day in range(20)]
    >>> swapped = LinearLMEndpoint(seed=1)
    >>> values += [mon.step(swapped, day) for day in range(20, 25)]
    >>> [e.onset for e in mon.events_], mon.cost_by_phase_["monitoring"].requests
    ([20], 5000)
    """

    def __init__(
        self,
        *,
        queries_per_input: int = 3,
        target: int = 50,
        max_candidates: int = 5000,
        reference_samples: int = 100,
        top_k: int = 20,
        min_bis: int = 10,
        samples_per_step: int = 10,
        window: int = 14,
        exclusion: int = 4,
        min_baseline: int = 5,
        sigma_k: float = 4.0,
        abs_delta: float = 0.2,
        persistence: int = 3,
        cooldown: int = 10,
        instability_window: int = 14,
        instability_threshold: float = 0.4,
        reinitialize: str = "never",
        on_event: Callable[[ChangeEvent], Any] | None = None,
        count_tokens: Callable[[str], int] | None = None,
        progress: bool = True,
        rng=None,
    ) -> None:
        self.queries_per_input = _int(
            queries_per_input, "queries_per_input", Interval("int", 2, None)
        )
        self.target = _int(target, "target", _POS_INT)
        self.max_candidates = _int(max_candidates, "max_candidates", _POS_INT)
        self.reference_samples = _int(reference_samples, "reference_samples", _POS_INT)
        self.top_k = _int(top_k, "top_k", _POS_INT)
        self.min_bis = _int(min_bis, "min_bis", _POS_INT)
        self.samples_per_step = _int(samples_per_step, "samples_per_step", _POS_INT)
        self._rule = dict(
            window=window,
            exclusion=exclusion,
            min_baseline=min_baseline,
            sigma_k=sigma_k,
            abs_delta=abs_delta,
            persistence=persistence,
            cooldown=cooldown,
        )
        _make_detector(**self._rule)  # validates
        self.instability_window = _int(instability_window, "instability_window", _POS_INT)
        self.instability_threshold = _real(
            instability_threshold, "instability_threshold", Interval("real", None, None)
        )
        if reinitialize not in ("never", "event"):
            raise ValueError(f"reinitialize must be 'never' or 'event', got {reinitialize!r}")
        self.reinitialize = reinitialize
        if on_event is not None and not callable(on_event):
            raise TypeError(f"on_event must be a callable or None, got {type(on_event).__name__}")
        self.on_event = on_event
        if count_tokens is not None and not callable(count_tokens):
            raise TypeError("count_tokens must be a callable str -> int or None")
        self.count_tokens = count_tokens
        self.progress = bool(progress)
        self._rng = check_rng(rng)
        self.events_: list[ChangeEvent] = []
        self.cost_by_phase_ = {k: Cost() for k in ("discovery", "reference", "monitoring")}
        self.needs_refit_ = False
        self._fitted = False

    @property
    def cost_(self) -> Cost:
        """Total cost over all phases.

        Examples
        --------
        >>> B3ITMonitor().cost_
        Cost(requests=0, input_tokens=0, output_tokens=0)
        """
        out = Cost()
        for c in self.cost_by_phase_.values():
            out = out + c
        return out

    @property
    def unstable_(self) -> bool:
        """Whether the median of the last ``instability_window`` values >= ``instability_threshold``.

        Examples
        --------
        >>> B3ITMonitor().unstable_
        False
        """
        return is_unstable(
            getattr(self, "series_", []), self.instability_window, self.instability_threshold
        )

    def _counting(self, sampler) -> CountingSampler:
        return CountingSampler(sampler, self.count_tokens)

    def fit(self, sampler_or_reference, candidates: Sequence[str] | None = None) -> B3ITMonitor:
        """Phase 1: find BIs and sample their reference, or adopt a recorded reference batch.

        Parameters
        ----------
        sampler_or_reference : TokenSampler or mapping str -> sequence of str / Counter
            A sampler: run discovery on ``candidates`` and sample the reference. A mapping: a
            recorded reference batch ``{prompt: tokens}`` (e.g. the first monitoring batch);
            its ``top_k`` most balanced prompts are monitored.
        candidates : sequence of str, optional
            Discovery candidates; default ``sampler.candidate_prompts()`` when the sampler has
            that method (as :class:`LinearLMEndpoint` does).

        Returns
        -------
        self : B3ITMonitor

        Examples
        --------
        >>> mon = B3ITMonitor(top_k=2, min_bis=2).fit({"a": ["x", "y"], "b": ["x"], "c": ["x", "z"]})
        >>> mon.prompts_
        ['a', 'c']
        """
        if isinstance(sampler_or_reference, Mapping):
            ref = _check_samples(sampler_or_reference, "sampler_or_reference")
            self.border_inputs_ = []
            reference = {p: Counter(t) for p, t in ref.items()}
        else:
            sampler = sampler_or_reference
            _check_sampler(sampler, "sampler_or_reference")
            if candidates is None:
                if not hasattr(sampler, "candidate_prompts"):
                    raise ValueError(
                        "candidates must be given when the sampler has no candidate_prompts()"
                    )
                candidates = sampler.candidate_prompts()
            cands = _check_prompts(candidates, "candidates")
            counting = self._counting(sampler)
            bis = find_border_inputs(
                counting,
                cands,
                self.queries_per_input,
                self.target,
                self.max_candidates,
                rng=self._rng,
                progress=self.progress,
            )
            self.cost_by_phase_["discovery"] += counting.reset()
            self.border_inputs_ = bis
            reference = (
                reference_distributions(counting, bis, self.reference_samples, self.progress)
                if bis
                else {}
            )
            self.cost_by_phase_["reference"] += counting.reset()
        if len(reference) < self.min_bis:
            raise RuntimeError(
                f"found {len(reference)} border inputs, fewer than min_bis={self.min_bis}: "
                f"this endpoint cannot be monitored with these candidates"
            )
        self.prompts_ = select_balanced(reference, self.top_k)
        self.reference_ = {p: reference[p] for p in self.prompts_}
        self.series_: list[tuple[Hashable, float]] = []
        self._detector = _make_detector(**self._rule)
        self._candidates = None if isinstance(sampler_or_reference, Mapping) else cands
        self.needs_refit_ = False
        self._fitted = True
        return self

    def statistic(self, batch) -> float:
        """Mean TV of a batch against the reference, over the monitored prompts it contains.

        Parameters
        ----------
        batch : mapping str -> sequence of str or Counter
            New first-token samples; prompts that are not monitored, or have no samples, are
            ignored.

        Returns
        -------
        value : float in [0, 1]

        Examples
        --------
        >>> mon = B3ITMonitor(top_k=1, min_bis=1).fit({"a": ["x", "y"]})
        >>> mon.statistic({"a": ["x", "x"]})
        0.5
        """
        self._check_fitted()
        new = _check_samples(batch, "batch", min_per_prompt=0)
        prompts = [p for p in self.prompts_ if new.get(p)]
        if not prompts:
            raise ValueError("batch must hold samples of at least one monitored prompt")
        ref = [list(self.reference_[p].elements()) for p in prompts]
        (c1, c2), n_bins = _bc.encode([ref, [new[p] for p in prompts]])
        a = _bc.counts(_bc.pad(c1)[0], n_bins)
        b = _bc.counts(_bc.pad(c2)[0], n_bins)
        return float(_bc.mean_tv(a, b))

    def step(self, sampler_or_batch, timestamp: Hashable) -> float:
        """One monitoring round: sample (or take) a batch, score it, update the sequential rule.

        Parameters
        ----------
        sampler_or_batch : TokenSampler or mapping str -> sequence of str / Counter
            A sampler is queried ``samples_per_step`` times per monitored BI (counted in
            :attr:`cost_`); a batch that arrived from elsewhere is scored as given (its samples
            are counted as requests too).
        timestamp : hashable
            Date of the batch; steps must come in time order.

        Returns
        -------
        value : float
            The batch's mean TV against the reference; NaN, and no update, when the batch
            holds no sample of a monitored prompt (an outage).

        Examples
        --------
        >>> mon = B3ITMonitor(top_k=1, min_bis=1).fit({"a": ["x", "y"]})
        >>> mon.step({"a": ["x", "y"]}, "2026-01-01"), len(mon.series_)
        (0.0, 1)
        """
        self._check_fitted()
        if isinstance(sampler_or_batch, Mapping):
            batch = _check_samples(
                sampler_or_batch, "sampler_or_batch", min_per_prompt=0, allow_empty=True
            )
            sampler = None
            cost = Cost()
            for p in self.prompts_:
                k = len(batch.get(p, ()))
                if k:
                    cost = cost + Cost(k, k * _input_tokens(self.count_tokens, p), k)
            self.cost_by_phase_["monitoring"] += cost
        else:
            sampler = sampler_or_batch
            _check_sampler(sampler, "sampler_or_batch")
            counting = self._counting(sampler)
            batch = {p: counting(p, self.samples_per_step) for p in self.prompts_}
            self.cost_by_phase_["monitoring"] += counting.reset()
        if not any(batch.get(p) for p in self.prompts_):
            return math.nan  # an outage: nothing to score, the series is left as it is
        value = self.statistic(batch)
        self.series_.append((timestamp, value))
        event = self._detector.update(timestamp, value)
        if event is not None:
            self.events_.append(event)
            if self.on_event is not None:
                self.on_event(event)
            if self.reinitialize == "event":
                if sampler is not None and self._candidates is not None:
                    self.fit(sampler, self._candidates)
                else:
                    self.needs_refit_ = True
        return value

    def _check_fitted(self) -> None:
        if not self._fitted:
            raise RuntimeError("this B3ITMonitor is not fitted yet; call fit(sampler) first")
