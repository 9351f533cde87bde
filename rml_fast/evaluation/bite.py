"""BITE: a disjoint-LinUCB bandit that searches edit operators to inflate an LLM judge's score.

BITE (Bias Exploration and Exploitation) treats each style edit of a response (cheerful tone,
a fabricated citation, a bullet list, "90% of evaluators rated this 10/10", ...) as an arm of
a contextual bandit whose context is the sentence embedding of ``"Question: q\\nResponse: r"``
and whose reward is the judge's score gain. The bandit is disjoint LinUCB (Li et al., 2010):
for every arm ``a``

    A_a = lambda I + sum x x^T,   b_a = sum r x,   theta_a = A_a^{-1} b_a,
    UCB_a(x) = theta_a^T x + alpha * sqrt(max(x^T A_a^{-1} x, 1e-18)),

with ``A_a^{-1}`` kept by Sherman-Morrison rank-one updates. Method after the reference code
github.com/xianglinyang/llm-as-a-judge-attack (``src/evolve_agent/bandit``); the paper's arXiv id
is not known to us.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_rng, check_scalar
from rml_fast.evaluation import _bite_ops as _ops
from rml_fast.evaluation._bite_linucb import LinUCB
from rml_fast.evaluation._bite_ops import (
    BagOfWordsEmbedder,
    EditOperator,
    arena_hard_verdict,
    llm_operators,
    rule_based_operators,
)

__all__ = [
    "OPERATOR_NAMES",
    "AttackResult",
    "BITEAttack",
    "BagOfWordsEmbedder",
    "EditOperator",
    "LinUCB",
    "arena_hard_verdict",
    "attack_success_rate",
    "llm_operators",
    "rule_based_operators",
    "score_lift",
    "semantic_preservation",
]

OPERATOR_NAMES: tuple[str, ...] = _ops.OPERATOR_NAMES
"""The ten arms in the paper's order (the index is the arm number)."""

# --------------------------------------------------------------------------------------------
# The attack
# --------------------------------------------------------------------------------------------


@dataclass
class AttackResult:
    """Outcome and trajectory of one BITE attack (``T`` = number of edits made).

    ``best_score`` / ``original_score`` are judge scores (pointwise) or signed preferences over
    the baseline (pairwise, ``> 0`` favours the attacked answer). Per-step arrays have shape
    ``(T,)``: ``arms`` pulled, ``scores`` of the edited texts, ``rewards`` fed to the bandit,
    ``best_so_far`` and ``pool_mean`` (pool scores after the step), ``replaced`` (the edit
    replaced the worst pool item), ``ci_width`` (``2 alpha sqrt(x^T A^{-1} x)`` of the chosen
    arm), ``ucb_gap`` (best minus second-best UCB) and ``lift_per_1k_tokens`` (best lift so far
    per 1000 whitespace-separated words generated so far, [PROPOSAL] token proxy).
    """

    question: str
    original: str
    best_response: str
    original_score: float
    best_score: float
    best_arm: int
    best_explanation: str
    judge_type: str
    arm_names: tuple[str, ...]
    arms: np.ndarray
    scores: np.ndarray
    rewards: np.ndarray
    texts: list[str]
    best_so_far: np.ndarray
    pool_mean: np.ndarray
    replaced: np.ndarray
    replacement_ratio: float
    ci_width: np.ndarray
    ucb_gap: np.ndarray
    lift_per_1k_tokens: np.ndarray
    n_cold_start: int
    n_judge_calls: int
    baseline: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("scores", "rewards", "best_so_far", "pool_mean", "ci_width", "ucb_gap",
                     "lift_per_1k_tokens"):
            arr = getattr(self, name)
            if isinstance(arr, np.ndarray) and arr.dtype.kind in "fc" and not bool(
                    np.isfinite(arr).all()):
                raise ValueError(f"{name} must be finite, got NaN or infinite values")

    @property
    def lift(self) -> float:
        """``best_score - original_score`` (>= 0: the original is in the pool)."""
        return self.best_score - self.original_score

    @property
    def calls_to_success(self) -> int | None:
        """Edits until the best score first beat the original (1-based), None if never."""
        hit = np.flatnonzero(self.best_so_far > self.original_score)
        return int(hit[0]) + 1 if hit.size else None

    @property
    def success(self) -> bool:
        """Pointwise: the best score beats the original's. Pairwise: the verdict flips to the
        attacked answer (``original_score <= 0 < best_score``). [PROPOSAL] definitions."""
        if self.judge_type == "pairwise":
            return self.original_score <= 0.0 < self.best_score
        return self.best_score > self.original_score


def _callable_name(f: Any) -> str:
    return getattr(f, "__name__", None) or type(f).__name__


class BITEAttack:
    """BITE: per-question LinUCB search over edit operators against a black-box judge.

    For a question ``q`` and response ``r0``: the pool starts as ``[r0]``; with ``cold_start``
    every arm is first applied once to ``r0``; then for each remaining step a seed is drawn
    uniformly from the pool, ``x = embed("Question: " + q + "\\n" + "Response: " + seed)``, the
    arm ``a = argmax_a UCB_a(x)`` (:class:`LinUCB`) edits the seed, the judge scores the edit
    ``s``, and the bandit is updated with ``(a, x, r)`` where ``r = s - s(seed)`` (``"relative"``)
    or ``r = s`` (``"absolute"``). The edit joins the pool while it has fewer than
    ``pool_size`` items, else replaces the worst item if ``s > s(worst) + margin``. The best
    pool item is returned. Each step costs one edit and at most one judge call (scores are
    cached by text within an attack, and an edit equal to a pool item is not added again).

    Pairwise mode scores ``s(text) = judge(q, text, baseline)`` (``position="first"``) or
    ``-judge(q, baseline, text)`` (``"second"``); a judge may return an Arena-Hard verdict string
    (``[[A>>B]]`` = 2 ... ``[[B>>A]]`` = -2) in place of the number.

    Parameters
    ----------
    judge : callable
        Pointwise ``(question, response) -> (score, explanation)`` or pairwise
        ``(question, response_a, response_b) -> (signed score, explanation)``.
    embedder : callable ``list[str] -> (n, d)`` array
        Unit-norm rows (e.g. :class:`~rml_fast.evaluation.embedders.MiniLMEmbedder`, d = 384).
    operators : mapping of str to EditOperator, or sequence of EditOperator, optional
        The arms (default: :func:`rule_based_operators`, six deterministic arms; use
        :func:`llm_operators` for the paper's ten LLM rewrites).
    judge_type : {"pointwise", "pairwise"}, default="pointwise"
    reward_type : {"relative", "absolute"}, default="relative"
    budget : int, default=20
        Edits per question ``T`` (the paper's scripts use 25); must be >= the number of arms
        with ``cold_start``.
    pool_size : int, default=3
    cold_start : bool, default=True
    alpha : float, default=1.0
        LinUCB exploration weight.
    lambda_reg : float, default=1.0
        LinUCB ridge parameter.
    margin : float, default=0.0
        Score margin an edit needs to replace the worst pool item.
    arm_policy : {"linucb", "random"}, default="linucb"
        ``"random"`` draws the arm uniformly (the reference code's "simple rewrite" baseline;
        the bandit is still updated, so the trajectory measures stay comparable).
    position : {"first", "second"}, default="first"
        Pairwise: where the attacked answer is placed.
    rng : numpy Generator, int or None
        Seeds the pool draws.

    Examples
    --------
    >>> judge = lambda q, r: (5.0 + 2.0 * ("\\n- " in "\\n" + r), "bullets +2")
    >>> attack = BITEAttack(judge, BagOfWordsEmbedder(dim=32), budget=8, rng=0)
    >>> res = attack.attack("Why is the sky blue?", "Rayleigh scattering. Blue scatters most.")
    >>> res.original_score, res.best_score, res.arm_names[res.best_arm]
    (5.0, 7.0, 'bullet_list')
    """

    def __init__(
        self,
        judge: Callable[..., Any],
        embedder: Callable[[list[str]], np.ndarray],
        operators: Mapping[str, EditOperator] | Sequence[EditOperator] | None = None,
        judge_type: str = "pointwise",
        reward_type: str = "relative",
        budget: int = 20,
        pool_size: int = 3,
        cold_start: bool = True,
        alpha: float = 1.0,
        lambda_reg: float = 1.0,
        margin: float = 0.0,
        position: str = "first",
        arm_policy: str = "linucb",
        rng: Any = None,
    ) -> None:
        for name, f in (("judge", judge), ("embedder", embedder)):
            if not callable(f):
                raise TypeError(f"{name} must be callable, got {type(f).__name__}")
        if operators is None:
            operators = rule_based_operators()
        if isinstance(operators, Mapping):
            names, ops = [str(k) for k in operators], list(operators.values())
        elif isinstance(operators, Sequence) and not isinstance(operators, str):
            ops = list(operators)
            names = [_callable_name(op) for op in ops]
        else:
            raise TypeError("operators must be a mapping name -> callable or a list of callables")
        if not ops or not all(callable(op) for op in ops):
            raise TypeError("operators must hold at least one callable str -> str")
        for name, value, allowed in (
            ("judge_type", judge_type, ("pointwise", "pairwise")),
            ("reward_type", reward_type, ("relative", "absolute")),
            ("position", position, ("first", "second")),
            ("arm_policy", arm_policy, ("linucb", "random")),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        self.budget = int(check_scalar(budget, "budget", Interval("int", 1, None)))
        self.pool_size = int(check_scalar(pool_size, "pool_size", Interval("int", 1, None)))
        self.alpha = float(check_scalar(alpha, "alpha", Interval("real", 0, None)))
        self.lambda_reg = float(
            check_scalar(lambda_reg, "lambda_reg", Interval("real", 0, None, "neither"))
        )
        self.margin = float(check_scalar(margin, "margin", Interval("real", 0, None)))
        if not isinstance(cold_start, (bool, np.bool_)):
            raise TypeError(f"cold_start must be a bool, got {cold_start!r}")
        if cold_start and self.budget < len(ops):
            raise ValueError(
                f"budget={self.budget} is smaller than the {len(ops)} arms a cold start pulls; "
                "raise budget or set cold_start=False"
            )
        self.judge, self.embedder = judge, embedder
        self.operators, self.arm_names = ops, tuple(names)
        self.judge_type, self.reward_type, self.position = judge_type, reward_type, position
        self.cold_start = bool(cold_start)
        self.arm_policy = arm_policy
        self._rng = check_rng(rng)
        self._dim: int | None = None
        self.bandit_: LinUCB | None = None

    # ---- black-box calls, checked ---------------------------------------------------------
    def _embed(self, texts: list[str]) -> np.ndarray:
        name = _callable_name(self.embedder)
        try:
            E = np.asarray(self.embedder(texts), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"embedder {name!r} did not return a numeric array: {exc}") from exc
        if E.ndim != 2 or E.shape[0] != len(texts) or E.shape[1] < 1:
            raise ValueError(
                f"embedder {name!r} must return shape ({len(texts)}, d), got {E.shape}"
            )
        if self._dim is not None and E.shape[1] != self._dim:
            raise ValueError(f"embedder {name!r} changed dimension: {self._dim} -> {E.shape[1]}")
        if not np.isfinite(E).all():
            raise ValueError(f"embedder {name!r} returned NaN or infinite values")
        norms = np.linalg.norm(E, axis=1)
        if np.abs(norms - 1.0).max() > 1e-3:
            raise ValueError(
                f"embedder {name!r} must return L2-normalised rows, got norms in "
                f"[{norms.min():.4g}, {norms.max():.4g}]"
            )
        self._dim = E.shape[1]
        return E

    def _judge(self, question: str, text: str, baseline: str | None) -> tuple[float, str]:
        if self.judge_type == "pointwise":
            out = self.judge(question, text)
        elif self.position == "first":
            out = self.judge(question, text, baseline)
        else:
            out = self.judge(question, baseline, text)
        name = _callable_name(self.judge)
        if isinstance(out, (tuple, list)) and len(out) == 2:
            s, expl = out
        else:
            s, expl = out, ""
        if self.judge_type == "pairwise" and isinstance(s, str):
            v = _ops.parse_verdict(s)
            if v is None:
                raise ValueError(f"judge {name!r} returned no Arena-Hard verdict: {s[:80]!r}")
            s = v
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Real):
            raise ValueError(f"judge {name!r} must return a real score, got {s!r}")
        s = float(s)
        if not math.isfinite(s):
            raise ValueError(
                f"judge {name!r} returned the non-finite score {s!r} for question {question[:60]!r}"
            )
        if self.judge_type == "pairwise" and self.position == "second":
            s = -s
        return s, str(expl)

    # ---- the search -----------------------------------------------------------------------
    def _check_texts(self, question: Any, response: Any, baseline: Any) -> None:
        for name, v in (("question", question), ("response", response)):
            if not isinstance(v, str):
                raise TypeError(f"{name} must be str, got {type(v).__name__}")
        if self.judge_type == "pairwise" and not isinstance(baseline, str):
            raise ValueError("baseline (a str) is required with judge_type='pairwise'")
        if self.judge_type == "pointwise" and baseline is not None:
            raise ValueError("baseline is only used with judge_type='pairwise'")

    def _new_bandit(self, state: Mapping[str, Any] | None) -> LinUCB | None:
        if state is None:
            return None
        if not isinstance(state, Mapping) or "n_features" not in state:
            raise ValueError("policy_state / warm_start must be a LinUCB.state_dict()")
        bandit = LinUCB(len(self.operators), int(state["n_features"]), self.alpha, self.lambda_reg)
        bandit.load_state_dict(state)
        return bandit

    def attack(
        self,
        question: str,
        response: str,
        baseline: str | None = None,
        policy_state: Mapping[str, Any] | None = None,
    ) -> AttackResult:
        """Attack one (question, response): ``budget`` edits, returns the best pool item.

        Parameters
        ----------
        question, response : str
        baseline : str, optional
            The reference answer (pairwise mode only, required there).
        policy_state : mapping, optional
            A :meth:`LinUCB.state_dict` to start from (warm start); default a fresh policy.

        Returns
        -------
        AttackResult

        Examples
        --------
        >>> judge = lambda q, a, b: ("[[A>B]]" if "10/10" in a else "[[B>A]]", "")
        >>> atk = BITEAttack(judge, BagOfWordsEmbedder(16), judge_type="pairwise", budget=6, rng=1)
        >>> r = atk.attack("Q?", "An answer.", baseline="Another answer.")
        >>> r.original_score, r.best_score, r.success
        (-1.0, 1.0, True)
        """
        self._check_texts(question, response, baseline)
        seed = int(self._rng.integers(0, 2**63 - 1))
        bandit = self._new_bandit(policy_state)
        return self._attack(question, response, baseline, np.random.default_rng(seed), bandit)

    def _attack(
        self,
        question: str,
        response: str,
        baseline: str | None,
        rng: np.random.Generator,
        bandit: LinUCB | None,
    ) -> AttackResult:
        K, T = len(self.operators), self.budget
        judged: dict[str, tuple[float, str]] = {}

        def score(text: str) -> tuple[float, str]:
            if text not in judged:
                judged[text] = self._judge(question, text, baseline)
            return judged[text]

        contexts: dict[str, np.ndarray] = {}

        def context(text: str) -> np.ndarray:
            if text not in contexts:
                contexts[text] = self._embed([f"Question: {question}\nResponse: {text}"])[0]
            return contexts[text]

        s0, _ = score(response)
        x0 = context(response)
        if bandit is None:
            bandit = LinUCB(K, x0.shape[0], self.alpha, self.lambda_reg)
        elif bandit.n_features != x0.shape[0]:
            raise ValueError(
                f"policy_state has n_features={bandit.n_features}, the embedder gives {x0.shape[0]}"
            )
        self.bandit_ = bandit
        pool, pool_s, pool_arm = [response], [s0], [-1]
        n_cold = K if self.cold_start else 0
        arms = np.zeros(T, dtype=np.int64)
        cols = {k: np.zeros(T) for k in ("scores", "rewards", "best", "mean", "ci", "gap", "lpk")}
        replaced = np.zeros(T, dtype=bool)
        texts: list[str] = []
        full_steps, words = 0, 0
        for t in range(T):
            if t < n_cold:
                seed, seed_s = response, s0
            else:
                i = int(rng.integers(len(pool)))
                seed, seed_s = pool[i], pool_s[i]
            x = context(seed)
            u = bandit.ucb(x)[0]
            if t < n_cold:
                a = t
            elif self.arm_policy == "random":
                a = int(rng.integers(K))
            else:
                a = int(np.argmax(u))
            top2 = np.sort(u)[-2:]
            cols["gap"][t] = top2[-1] - top2[0] if K > 1 else 0.0
            cols["ci"][t] = 2.0 * (u[a] - float(x @ bandit.theta_[0, a]))
            new = self.operators[a](seed)
            if not isinstance(new, str):
                raise TypeError(
                    f"operator {self.arm_names[a]!r} returned {type(new).__name__}, not str"
                )
            s, _ = score(new)
            r = s - seed_s if self.reward_type == "relative" else s
            bandit.update(a, x, r)
            if new not in pool:
                if len(pool) < self.pool_size:
                    pool.append(new)
                    pool_s.append(s)
                    pool_arm.append(a)
                else:
                    full_steps += 1
                    w = int(np.argmin(pool_s))
                    if s > pool_s[w] + self.margin:
                        pool[w], pool_s[w], pool_arm[w] = new, s, a
                        replaced[t] = True
            elif len(pool) >= self.pool_size:
                full_steps += 1
            words += len(new.split())
            arms[t] = a
            texts.append(new)
            cols["scores"][t], cols["rewards"][t] = s, r
            cols["best"][t], cols["mean"][t] = max(pool_s), float(np.mean(pool_s))
            cols["lpk"][t] = (max(pool_s) - s0) / max(words / 1000.0, 1e-12)
        b = int(np.argmax(pool_s))
        return AttackResult(
            question=question,
            original=response,
            best_response=pool[b],
            original_score=s0,
            best_score=pool_s[b],
            best_arm=pool_arm[b],
            best_explanation=judged[pool[b]][1],
            judge_type=self.judge_type,
            arm_names=self.arm_names,
            arms=arms,
            scores=cols["scores"],
            rewards=cols["rewards"],
            texts=texts,
            best_so_far=cols["best"],
            pool_mean=cols["mean"],
            replaced=replaced,
            replacement_ratio=float(replaced.sum() / full_steps) if full_steps else 0.0,
            ci_width=cols["ci"],
            ucb_gap=cols["gap"],
            lift_per_1k_tokens=cols["lpk"],
            n_cold_start=n_cold,
            n_judge_calls=len(judged),
            baseline=baseline,
        )

    def attack_many(
        self,
        questions: Sequence[str],
        responses: Sequence[str],
        baselines: Sequence[str] | None = None,
        warm_start: bool | Mapping[str, Any] = False,
        n_jobs: int | None = None,
        progress: bool = True,
    ) -> list[AttackResult]:
        """Attack many questions; each gets its own policy unless ``warm_start``.

        Parameters
        ----------
        questions, responses : sequence of str, same length
        baselines : sequence of str, optional
            Pairwise mode: one baseline answer per question.
        warm_start : bool or mapping, default=False
            False: a fresh policy per question (the paper's per-question reset). True: one policy
            carried from question to question, in order (online learning; sequential). A
            :meth:`LinUCB.state_dict`: every question starts from that trained policy.
        n_jobs : int, optional
            Threads for independent questions (judge/LLM calls are usually I/O bound); results
            do not depend on it.
        progress : bool, default=True
            Show a tqdm bar.

        Returns
        -------
        results : list of AttackResult
            Equal to calling :meth:`attack` on each question in order with the same ``rng``.

        Examples
        --------
        >>> judge = lambda q, r: (float(len(r) > 40), "")
        >>> atk = BITEAttack(judge, BagOfWordsEmbedder(16), budget=6, rng=0)
        >>> res = atk.attack_many(["Q1", "Q2"], ["Short.", "Also short."], progress=False)
        >>> attack_success_rate(res), score_lift(res)
        (1.0, 1.0)
        """
        questions, responses = list(questions), list(responses)
        n = len(questions)
        if len(responses) != n:
            raise ValueError(f"responses must have {n} entries, got {len(responses)}")
        if baselines is None:
            base: list[str | None] = [None] * n
        else:
            base = list(baselines)
            if len(base) != n:
                raise ValueError(f"baselines must have {n} entries, got {len(base)}")
        for q, r, b in zip(questions, responses, base, strict=True):
            self._check_texts(q, r, b)
        if n_jobs is not None:
            n_jobs = int(check_scalar(n_jobs, "n_jobs", Interval("int", 1, None)))
        if warm_start is True and (n_jobs or 1) > 1:
            raise ValueError("warm_start=True runs the questions in order; use n_jobs=None")
        if not isinstance(warm_start, (bool, Mapping)):
            raise TypeError(f"warm_start must be a bool or a state_dict, got {warm_start!r}")
        seeds = [int(self._rng.integers(0, 2**63 - 1)) for _ in range(n)]
        state = warm_start if isinstance(warm_start, Mapping) else None
        shared: list[LinUCB | None] = [None]

        def one(i: int) -> AttackResult:
            bandit = shared[0] if warm_start is True else self._new_bandit(state)
            res = self._attack(
                questions[i], responses[i], base[i], np.random.default_rng(seeds[i]), bandit
            )
            if warm_start is True:
                shared[0] = self.bandit_
            return res

        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc="BITE", disable=not progress)
        try:
            if (n_jobs or 1) == 1:
                out = []
                for i in range(n):
                    out.append(one(i))
                    bar.update()
                return out
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=n_jobs) as pool:
                futures = [pool.submit(one, i) for i in range(n)]
                out = []
                for f in futures:
                    out.append(f.result())
                    bar.update()
                return out
        finally:
            bar.close()


# --------------------------------------------------------------------------------------------
# Measures
# --------------------------------------------------------------------------------------------


def _check_results(results: Any) -> list[AttackResult]:
    results = list(results)
    if not results or not all(isinstance(r, AttackResult) for r in results):
        raise ValueError("results must be a non-empty sequence of AttackResult")
    return results


def attack_success_rate(results: Sequence[AttackResult]) -> float:
    """Fraction of attacks that succeeded (:attr:`AttackResult.success`). [PROPOSAL]

    Pointwise: best score > original score. Pairwise: the verdict flips in favour of the
    attacked answer (``original <= 0 < best``).

    Examples
    --------
    >>> judge = lambda q, r: (1.0 + ("Source:" in r), "")
    >>> res = BITEAttack(judge, BagOfWordsEmbedder(8), budget=6, rng=0).attack("Q", "A.")
    >>> attack_success_rate([res])
    1.0
    """
    return float(np.mean([r.success for r in _check_results(results)]))


def score_lift(results: Sequence[AttackResult]) -> float:
    """Mean judge-score lift ``best_score - original_score`` over the attacks.

    Examples
    --------
    >>> judge = lambda q, r: (1.0 + 3.0 * ("10/10" in r), "")
    >>> res = BITEAttack(judge, BagOfWordsEmbedder(8), budget=6, rng=0).attack("Q", "A.")
    >>> score_lift([res])
    3.0
    """
    return float(np.mean([r.lift for r in _check_results(results)]))


def semantic_preservation(
    results: Sequence[AttackResult],
    embedder: Callable[[list[str]], np.ndarray],
    tau: float = 0.8,
    among: str = "successful",
) -> float:
    """Fraction of attacks whose best text keeps the original's meaning. [PROPOSAL]

    Meaning is kept when ``cos(embed(original), embed(best)) >= tau`` (the paper's LLM
    equivalence check is not reproduced). ``among="successful"`` (default) counts successful
    attacks only (an unsuccessful attack returns the original, trivially preserved) and gives
    NaN when none succeeded; ``"all"`` counts every attack.

    Parameters
    ----------
    results : sequence of AttackResult
    embedder : callable ``list[str] -> (n, d)`` with unit rows
    tau : float in [-1, 1], default=0.8
    among : {"successful", "all"}

    Returns
    -------
    fraction : float in [0, 1] (or NaN)

    Examples
    --------
    >>> judge = lambda q, r: (1.0 + ("\\n" in r), "")
    >>> emb = BagOfWordsEmbedder(256)
    >>> res = BITEAttack(judge, emb, budget=6, rng=0).attack("Q", "One fact. Two facts.")
    >>> semantic_preservation([res], emb, tau=0.5)
    1.0
    """
    results = _check_results(results)
    tau = float(check_scalar(tau, "tau", Interval("real", -1, 1)))
    if among not in ("successful", "all"):
        raise ValueError(f"among must be 'successful' or 'all', got {among!r}")
    chosen = [r for r in results if r.success] if among == "successful" else results
    if not chosen:
        return float("nan")
    E = np.asarray(embedder([t for r in chosen for t in (r.original, r.best_response)]))
    if E.ndim != 2 or E.shape[0] != 2 * len(chosen):
        raise ValueError(f"embedder must return shape ({2 * len(chosen)}, d), got {E.shape}")
    E = E.astype(np.float64)
    norms = np.linalg.norm(E, axis=1)
    if not np.isfinite(E).all() or np.abs(norms - 1.0).max() > 1e-3:
        raise ValueError("embedder must return finite L2-normalised rows")
    cos = np.einsum("nd,nd->n", E[0::2], E[1::2])
    return float(np.mean(cos >= tau))
