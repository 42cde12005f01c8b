"""Entailment with proof depth, ProofWriter-style: a theory of facts ("Anne is big.") and rules ("If someone is
big and kind then they are red.", "All round people are cold.", "If Bob is blue then Bob is quiet."), and a
question ("Anne is red." / "Anne is not red.") whose answer follows under the closed-world assumption: a
statement is true when it is derivable, its negation true when it is not.

Each question is labelled with its proof depth: the least number of rule applications that derives the fact it
asks about (0: a given fact). A question about a fact that cannot be derived gets the depth of the theory's whole
closure (the forward-chaining rounds it takes to see that nothing more follows, capped at 5), the work needed to
conclude it is not there.

Also a loader for the published ProofWriter JSONL layout (``meta-*.jsonl``: one theory per line with its
``triples``, ``rules`` and ``questions``, each question with ``question``, ``answer`` and ``QDep``), and
:func:`embed_entailment`, which turns the sentences into vectors with a frozen sentence encoder (see
:mod:`equilibria.tasks.embedding`) for the PH-DEQ.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from datasets import Dataset, DatasetDict

NAMES = ("Anne", "Bob", "Charlie", "Dave", "Erin", "Fiona", "Gary", "Harry")
ATTRIBUTES = (
    "big",
    "blue",
    "cold",
    "furry",
    "green",
    "kind",
    "nice",
    "quiet",
    "red",
    "rough",
    "round",
    "smart",
    "white",
    "young",
)
MAX_DEPTH = 5

Fact = tuple[str, str]  # (entity, attribute)
Rule = tuple[tuple[str, ...], str, str | None]  # (body attributes, head attribute, entity or None for "someone")


def fact_text(entity: str, attribute: str, negated: bool = False) -> str:
    return f"{entity} is {'not ' if negated else ''}{attribute}."


def rule_text(rule: Rule, style: int = 0) -> str:
    body, head, entity = rule
    if entity is not None:
        cond = " and ".join(f"{entity} is {a}" for a in body)
        return f"If {cond} then {entity} is {head}."
    if len(body) == 1 and style % 2 == 1:
        return f"All {body[0]} people are {head}."
    return f"If someone is {' and '.join(body)} then they are {head}."


def closure(facts: list[Fact], rules: list[Rule]) -> tuple[dict[Fact, int], int]:
    """Forward chaining: every derivable fact with its least proof depth (0 for the given facts), and the number
    of rounds until nothing new follows."""
    depth = {f: 0 for f in facts}
    entities = sorted({e for e, _ in facts} | {r[2] for r in rules if r[2] is not None})
    rounds = 0
    while True:
        new = {}
        for body, head, who in rules:
            for entity in [who] if who is not None else entities:
                if (entity, head) in depth or (entity, head) in new:
                    continue
                if all((entity, a) in depth for a in body):
                    new[(entity, head)] = 1 + max(depth[(entity, a)] for a in body)
        if not new:
            return depth, rounds
        depth.update(new)
        rounds += 1


def generate_theory(rng: random.Random, target_depth: int, num_entities: int = 3, num_distractors: int = 4):
    """A theory in which some fact needs exactly ``target_depth`` rule applications: a planted chain
    ``a0 -> a1 -> ... -> a_D`` (each link possibly with a second condition that a given fact satisfies), plus
    distractor facts and rules. Returns ``(facts, rules)``."""
    entities = rng.sample(NAMES, num_entities)
    attrs = rng.sample(ATTRIBUTES, min(len(ATTRIBUTES), target_depth + 1 + num_distractors))
    hero = entities[0]
    chain, spare = attrs[: target_depth + 1], attrs[target_depth + 1 :]
    facts: list[Fact] = [(hero, chain[0])]
    rules: list[Rule] = []
    for prev, nxt in zip(chain, chain[1:]):
        body = [prev]
        if spare and rng.random() < 0.4:
            extra = rng.choice(spare)
            body.append(extra)
            facts.append((hero, extra))
        who = hero if rng.random() < 0.2 else None
        rules.append((tuple(body), nxt, who))
    for _ in range(num_distractors):
        entity = rng.choice(entities)
        facts.append((entity, rng.choice(attrs)))
        body = tuple(rng.sample(attrs, rng.choice([1, 1, 2])))
        head = rng.choice([a for a in attrs if a not in body])
        rules.append((body, head, None))
    facts = list(dict.fromkeys(facts))
    rules = list(dict.fromkeys(rules))
    rng.shuffle(facts)
    rng.shuffle(rules)
    return facts, rules


def build_entailment_dataset(
    num_train: int = 2000,
    num_test: int = 500,
    max_depth: int = MAX_DEPTH,
    seed: int = 0,
    num_entities: int = 3,
    num_distractors: int = 4,
) -> DatasetDict:
    """Seeded splits of (theory, question) pairs, balanced over proof depths ``0..max_depth`` for the derivable
    facts and over true/false answers, sharing no question between train and test.

    Per theory, four questions are drawn: a fact derivable at the target depth asked plainly (true) and negated
    (false), and a fact that is not derivable asked plainly (false) and negated (true), so neither the word "not"
    nor the presence of a fact gives the answer away.

    Columns: ``theory`` (list of sentences: facts then rules), ``question``, ``answer`` (bool), ``labels`` (1 for
    true), ``depth`` (proof depth, see the module docstring), ``difficulty`` (= depth), ``derivable``."""
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 0 <= max_depth <= MAX_DEPTH:
        raise ValueError(f"max_depth must be an integer in [0, {MAX_DEPTH}], got {max_depth!r}")
    if num_train < 1 or num_test < 0:
        raise ValueError(f"num_train must be >= 1 and num_test >= 0, got {num_train}, {num_test}")
    if not 1 <= num_entities <= len(NAMES):
        raise ValueError(f"num_entities must be in [1, {len(NAMES)}], got {num_entities}")
    rng = random.Random(f"entailment-{max_depth}-{seed}")
    total = num_train + num_test
    rows, seen = [], set()
    attempts = 0
    while len(rows) < total + 8:  # a little spare, so whole theories can go to one side
        attempts += 1
        if attempts > 50 * total + 100:
            raise ValueError(f"could not draw {total} distinct questions (max_depth={max_depth})")
        target = len(rows) // 4 % (max_depth + 1)
        facts, rules = generate_theory(rng, target, num_entities, num_distractors)
        depths, rounds = closure(facts, rules)
        at_target = [f for f, d in depths.items() if d == target]
        entities = sorted({e for e, _ in facts})
        missing = [(e, a) for e in entities for a in ATTRIBUTES if (e, a) not in depths]
        if not at_target or not missing:
            continue
        theory = [fact_text(*f) for f in facts] + [rule_text(r, rng.randrange(2)) for r in rules]
        asked, absent = rng.choice(at_target), rng.choice(missing)
        for fact, negated, derivable in (
            (asked, False, True),
            (asked, True, True),
            (absent, False, False),
            (absent, True, False),
        ):
            question = fact_text(*fact, negated=negated)
            key = (tuple(theory), question)
            if key in seen:
                continue
            seen.add(key)
            answer = derivable != negated
            depth = depths[fact] if derivable else min(rounds, MAX_DEPTH)
            rows.append(
                {
                    "theory": theory,
                    "question": question,
                    "answer": answer,
                    "labels": int(answer),
                    "depth": depth,
                    "difficulty": depth,
                    "derivable": derivable,
                }
            )
    # whole theories go to one side: no question, and no theory, is shared between train and test
    by_theory: dict[tuple, list] = {}
    for row in rows:
        by_theory.setdefault(tuple(row["theory"]), []).append(row)
    groups = list(by_theory.values())
    random.Random(seed).shuffle(groups)
    train, test = [], []
    for group in groups:
        (train if len(train) < num_train else test).extend(group)
    train, test = train[:num_train], test[:num_test]
    random.Random(seed + 1).shuffle(train)
    return DatasetDict(train=Dataset.from_list(train), test=Dataset.from_list(test or rows[:0]))


PROOFWRITER_ANSWERS = {True: 1, False: 0, "Unknown": 2}


def load_proofwriter_jsonl(path: str | Path, max_depth: int | None = None) -> Dataset:
    """Read a published ProofWriter ``meta-*.jsonl`` file: one row per question with the columns of
    :func:`build_entailment_dataset` (``theory``: the triples' then the rules' sentences, ``question``,
    ``answer``, ``labels`` 1/0 for True/False and 2 for "Unknown" (open-world files), ``depth`` = ``QDep``,
    ``difficulty``) plus ``id``. ``max_depth`` keeps only questions up to that depth. Bad lines raise
    ``ValueError`` naming the line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such ProofWriter file: {path}")
    rows = []
    with path.open() as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                theory = [t["text"] for t in record["triples"].values()] + [r["text"] for r in record["rules"].values()]
                questions = record["questions"]
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
                raise ValueError(
                    f"{path}:{number}: not a ProofWriter theory (needs 'triples' and 'rules' with 'text', and "
                    f"'questions'): {err}"
                ) from None
            for qid, q in questions.items():
                try:
                    answer, depth, text = q["answer"], q["QDep"], q["question"]
                except (KeyError, TypeError):
                    raise ValueError(f"{path}:{number}: question {qid} needs 'question', 'answer' and 'QDep'") from None
                if answer not in PROOFWRITER_ANSWERS:
                    raise ValueError(
                        f"{path}:{number}: question {qid} has answer {answer!r}; expected true, false or 'Unknown'"
                    )
                if not isinstance(depth, int) or depth < 0:
                    raise ValueError(f"{path}:{number}: question {qid} has QDep {depth!r}; expected an integer >= 0")
                if max_depth is not None and depth > max_depth:
                    continue
                rows.append(
                    {
                        "id": f"{record.get('id', number)}-{qid}",
                        "theory": theory,
                        "question": text,
                        "answer": str(answer),
                        "labels": PROOFWRITER_ANSWERS[answer],
                        "depth": depth,
                        "difficulty": depth,
                    }
                )
    if not rows:
        raise ValueError(
            f"{path}: no questions (with QDep <= {max_depth})" if max_depth is not None else f"{path}: no questions"
        )
    return Dataset.from_list(rows)


__all__ = [
    "build_entailment_dataset",
    "closure",
    "generate_theory",
    "load_proofwriter_jsonl",
]
