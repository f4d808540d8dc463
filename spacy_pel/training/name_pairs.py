"""Name pairs beside mention training (``[augment] name_pairs``, trained entity tower only).

The pipeline reads the entity tower in a second form besides the KB rows: ``[CLS] name [SEP]``, for
the name rows and for the mention's own text scored against each candidate's best name (the
``names`` rule's ``text_weight``; NCBI disease dev R@1 0.896 without it, 0.911 with it). Mention
training alone teaches the tower only the KB-row form. This loss keeps teaching it the name form, in
SapBERT's way, from the batch itself: each mention's text (its word pieces between the markers) and
one of its gold entity's names drawn at random are both encoded as names, and a supervised InfoNCE
over all of them (:func:`~spacy_pel.models.pair_losses.info_nce_loss`) pulls the texts and names
of one entity together and pushes the batch's other entities away. A composite mention (several gold
entities) takes no part. The names drawn depend on the seed and the step only, so a resumed run
draws the same ones. Measured on NCBI disease + MEDIC at 0.5 (benchmarks/ncbi_name_pairs_workflow.md): R@1
0.900 against 0.903-0.911 without it, so it is off by default.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import torch

from ..kb import Entity
from ..models.encoder import BiEncoder
from ..models.pair_losses import info_nce_loss
from ..retrieval.names import MAX_LENGTH, entity_names, name_inputs
from .stages import Examples


class NamePairLoss:
    """``weight`` × InfoNCE over the batch's mention texts and gold names, as the entity tower encodes names."""

    def __init__(self, encoder: BiEncoder, entities: Sequence[Entity], weight: float, seed: int = 0,
                 scale: float = 20.0, max_length: int = MAX_LENGTH):
        self.encoder, self.entities = encoder, entities
        self.weight, self.seed, self.scale, self.max_length = weight, seed, scale, max_length
        self._names: Dict[int, List[List[int]]] = {}

    def names(self, row: int) -> List[List[int]]:
        """The ``[CLS] name [SEP]`` inputs of every name of KB row ``row`` (made once)."""
        if row not in self._names:
            names = entity_names(self.entities[row]) or [self.entities[row].name]
            self._names[row] = name_inputs(self.encoder, names, [""] * len(names), "name", self.max_length)
        return self._names[row]

    def mention_text(self, ids: List[int], span) -> List[int]:
        """The mention's word pieces (between its markers) as a name input."""
        tok = self.encoder.tokenizer
        start, end = span
        return [tok.cls_token_id, *ids[start + 1 : end][: self.max_length - 2], tok.sep_token_id]

    def pairs(self, examples: Examples, step: int):
        """The inputs and entity labels of one step: a mention text and a drawn gold name per mention."""
        rng = np.random.default_rng([self.seed, step])
        seqs: List[List[int]] = []
        labels: List[int] = []
        for (ids, span), gold in zip(examples.inputs, examples.gold):
            if len(gold) != 1:
                continue
            row = next(iter(gold))
            names = self.names(row)
            seqs += [self.mention_text(ids, span), names[int(rng.integers(len(names)))]]
            labels += [row, row]
        return seqs, labels

    def __call__(self, examples: Examples, step: int) -> torch.Tensor:
        seqs, labels = self.pairs(examples, step)
        if len(set(labels)) < 2:  # no negative in the batch
            return torch.zeros((), device=self.encoder.device_)
        x = self.encoder.embed_entities(seqs)
        return self.weight * info_nce_loss(x, torch.tensor(labels, device=x.device), self.scale)
