import itertools
import json

import networkx as nx
import numpy as np
import pytest
import spacy
import typer
from spacy.tokens import Span
from typer.testing import CliRunner

import spacy_pel.cli.discover as discover_cli
from spacy_pel.cli.discover import app
from spacy_pel.corpora import GOLD_KEY, read_docbin, write_docbin
from spacy_pel.discovery.cluster import (
    DISCOVERED_KEY,
    cluster,
    cluster_scores,
    discover,
    mention_knn_edges,
    nearest_entities,
    nil_cluster_ids,
)
from spacy_pel.training.arborescence import arborescence_positives
from tests.test_cli_errors import one_line_error


def unit(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ---------------------------------------------------------------- arborescence positives
def test_arborescence_chain():
    # entity strongly tied to m0, m0 to m1, m1 to m2; m1 and m2 only weakly to the entity
    ent = np.array([0.9, 0.1, 0.05])
    mm = np.zeros((3, 3))
    mm[0, 1], mm[1, 2] = 0.8, 0.7  # edges m0 → m1 and m1 → m2
    assert arborescence_positives(ent, mm) == [-1, 0, 1]
    # direction matters: with the edges reversed (m1 → m0, m2 → m1) m2 hangs from the entity and m1
    # from m2 (0.05 + 0.7 beats 0.1 + 0), while m0 keeps its strong entity edge
    assert arborescence_positives(ent, mm.T.copy()) == [-1, 2, -1]


def test_arborescence_ties_prefer_entity_then_lower_index():
    assert arborescence_positives(np.full(3, 0.5), np.full((3, 3), 0.5)) == [-1, -1, -1]
    mm = np.full((3, 3), 0.9)
    assert arborescence_positives(np.array([0.9, 0.1, 0.1]), mm) == [-1, 0, 0]
    assert arborescence_positives(np.zeros(0), np.zeros((0, 0))) == []
    with pytest.raises(ValueError):
        arborescence_positives(np.zeros(2), np.zeros((3, 3)))


def brute_force_best(ent, mm):
    """The best total affinity over every parent vector that forms an arborescence rooted at -1."""
    n, best = len(ent), -np.inf
    for parents in itertools.product(range(-1, n), repeat=n):
        if any(p == i for i, p in enumerate(parents)):
            continue
        ok = True
        for i in range(n):  # every mention must reach the root
            seen, x = set(), i
            while x != -1 and x not in seen:
                seen.add(x)
                x = parents[x]
            ok &= x == -1
        if ok:
            best = max(best, sum(ent[i] if p == -1 else mm[p, i] for i, p in enumerate(parents)))
    return best


@pytest.mark.parametrize("seed", range(8))
def test_arborescence_is_optimal(seed):
    rng = np.random.default_rng(seed)
    n = 4
    ent, mm = rng.random(n), rng.random((n, n))
    parents = arborescence_positives(ent, mm)
    total = sum(ent[i] if p == -1 else mm[p, i] for i, p in enumerate(parents))
    assert total == pytest.approx(brute_force_best(ent, mm), abs=1e-5)


# ---------------------------------------------------------------- clustering
ENTITY_VECS = unit(np.eye(4)[:2])  # E1 along x, E2 along y
ENTITY_IDS = ["E1", "E2"]


def hand_mentions():
    return unit(
        [
            [1, 0.1, 0, 0],  # near E1
            [1, 0, 0.1, 0],  # near E1
            [0.1, 1, 0, 0],  # near E2
            [0, 1, 0, 0.1],  # near E2
            [0, 0, 1, 0.05],  # a tight group far from both entities
            [0, 0.05, 1, 0],
            [0.05, 0, 1, 0.02],
        ]
    )


def test_cluster_hand_made():
    ents, comps = cluster(hand_mentions(), (ENTITY_VECS, ENTITY_IDS), k=3, threshold=0.5)
    assert ents == ["E1", "E1", "E2", "E2", None, None, None]
    assert comps[4] == comps[5] == comps[6] and len({comps[0], comps[2], comps[4]}) == 3
    assert comps[0] == comps[1] and comps[2] == comps[3]
    assert list(comps) == sorted(comps)  # numbered by first mention
    # without a threshold the group keeps its (weak) nearest-entity edge: nothing is discovered
    ents, _ = cluster(hand_mentions(), (ENTITY_VECS, ENTITY_IDS), k=3)
    assert None not in ents
    empty_ents, empty_comps = cluster(np.zeros((0, 4), np.float32), (ENTITY_VECS, ENTITY_IDS))
    assert empty_ents == [] and len(empty_comps) == 0


def test_chain_between_two_entities_is_cut_at_its_weakest_link():
    # E1 – m0 – m1 – m2 – E2: every link is stronger than m1's direct entity edges, so without the
    # constraint all would join; the weakest link on the E1…E2 path (m1–m2) is the one dropped
    mentions = unit([[1, 0.4, 0, 0], [1, 0.95, 0, 0], [0.4, 1, 0, 0], [0.42, 1, 0.01, 0]])
    ents, comps = cluster(mentions, (ENTITY_VECS, ENTITY_IDS), k=3)
    assert ents == ["E1", "E1", "E2", "E2"]
    assert comps[0] == comps[1] != comps[2] == comps[3]
    # a mention pair closer to each other than to their entities merges first and takes one entity
    ents, comps = cluster(unit([[1, 0.98, 0, 0], [0.98, 1, 0, 0]]), (ENTITY_VECS, ENTITY_IDS), k=1)
    assert ents == ["E1", "E1"] and comps[0] == comps[1]


def test_mention_margin_lets_entity_edges_win():
    # two mentions nearer to each other (0.98) than to their own entities (E1 / E2): with β = 0 they
    # merge first and share one entity; with β larger than the gap each keeps its own entity
    mentions = unit([[1, 0.75, 0, 0], [0.75, 1, 0, 0]])
    sims = mentions @ mentions.T
    ents, comps = cluster(mentions, (ENTITY_VECS, ENTITY_IDS), k=1)
    assert sims[0, 1] > (mentions @ ENTITY_VECS.T).max() and len(set(ents)) == 1 and comps[0] == comps[1]
    ents, comps = cluster(mentions, (ENTITY_VECS, ENTITY_IDS), k=1, mention_margin=0.5)
    assert ents == ["E1", "E2"] and comps[0] != comps[1]
    # β = inf: a mention below λ still joins its nearest mention's cluster and takes its entity
    strong, weak = unit([[1, 0.05, 0, 0]])[0], unit([[0.6, 0.1, 0.8, 0]])[0]
    ents, _ = cluster(np.stack([strong, weak]), (ENTITY_VECS, ENTITY_IDS), k=1, threshold=0.7,
                      mention_threshold=0.5, mention_margin=float("inf"))
    assert float(weak @ ENTITY_VECS[0]) < 0.7 <= float(strong @ ENTITY_VECS[0]) and ents == ["E1", "E1"]


def reference_partition(m, u, v, w, entity_edges):
    """Maximum spanning forest, then cut the weakest edge on an entity–entity path until none is left.
    ``entity_edges``: (mention, similarity, entity id); entity nodes are the (string) ids."""
    graph = nx.Graph()
    graph.add_nodes_from(range(m))
    graph.add_weighted_edges_from((int(a), int(b), float(s)) for a, b, s in zip(u, v, w))
    graph.add_weighted_edges_from((i, e, float(s)) for i, s, e in entity_edges)
    forest = nx.maximum_spanning_tree(graph)
    entity_nodes = sorted({e for _, _, e in entity_edges})
    while True:
        on_paths = []
        for a, b in itertools.combinations(entity_nodes, 2):
            if nx.has_path(forest, a, b):
                path = nx.shortest_path(forest, a, b)
                on_paths += [(forest[x][y]["weight"], x, y) for x, y in zip(path, path[1:])]
        if not on_paths:
            break
        _, x, y = min(on_paths, key=lambda t: t[0])
        forest.remove_edge(x, y)
    out = []
    for i in range(m):
        comp = nx.node_connected_component(forest, i)
        assert sum(isinstance(j, str) for j in comp) <= 1
        out.append(({j for j in comp if not isinstance(j, str)}, next((j for j in comp if isinstance(j, str)), None)))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_random_no_component_holds_two_entities(seed):
    rng = np.random.default_rng(seed)
    entities = unit(rng.normal(size=(5, 8)))
    ids = [f"E{i}" for i in range(5)]
    mentions = unit(entities[rng.integers(0, 5, 40)] + 0.9 * rng.normal(size=(40, 8)))
    threshold = [None, 0.75][seed % 2]
    ents, comps = cluster(mentions, (entities, ids), k=4, threshold=threshold)
    for c in set(comps):
        assert len({ents[i] for i in np.flatnonzero(comps == c)}) == 1
    # every linked component's entity is the nearest entity of one of its mentions
    scores, nearest = nearest_entities(mentions, (entities, ids))
    for c in set(comps):
        members = np.flatnonzero(comps == c)
        if ents[members[0]] is not None:
            assert ents[members[0]] in {nearest[i] for i in members}
    # the same partition as the spanning-forest formulation of cluster()'s docstring
    floor = -np.inf if threshold is None else threshold
    u, v, w = mention_knn_edges(mentions, 4)
    keep = w >= floor
    entity_edges = [(i, s, e) for i, (s, e) in enumerate(zip(scores, nearest)) if s >= floor]
    ref = reference_partition(40, u[keep], v[keep], w[keep], entity_edges)
    for i in range(40):
        members, entity = ref[i]
        assert set(np.flatnonzero(comps == comps[i]).tolist()) == members
        assert ents[i] == entity
    if threshold is not None:
        assert None in ents  # some mentions were left to NIL clusters


def test_cluster_with_entity_index(kb_dir):
    from spacy_pel.retrieval.index import EntityIndex

    index = EntityIndex.from_disk(kb_dir)
    vectors = index.searcher.reconstruct_n(0, index.searcher.ntotal)
    ents, comps = cluster(vectors[[0, 0, 3]], index, k=2, threshold=0.99)
    assert ents == ["D1", "D1", "D4"] and comps[0] == comps[1] != comps[2]


# ---------------------------------------------------------------- NIL ids
def test_nil_ids_by_smallest_key():
    comps = [0, 1, 1, 2, 0, 3]
    ents = [None, None, None, "E", None, None]
    keys = [(2, 0), (0, 5), (1, 0), (0, 0), (0, 9), (3, 1)]
    # component 1 (smallest key (0, 5)) < component 0 ((0, 9)) < component 3
    assert nil_cluster_ids(comps, ents, keys) == ["NIL:1", "NIL:0", "NIL:0", "E", "NIL:1", "NIL:2"]
    with pytest.raises(ValueError):
        nil_cluster_ids(comps, ents, keys[:-1])


def test_nil_ids_stable_across_runs_and_orders():
    rng = np.random.default_rng(3)
    entities = unit(rng.normal(size=(3, 16)))
    mentions = unit(np.concatenate([entities[rng.integers(0, 3, 20)], rng.normal(size=(4, 16))]) + 0.3 * rng.normal(size=(24, 16)))
    ids = ["A", "B", "C"]
    keys = [(i // 5, 10 * i, 10 * i + 4) for i in range(24)]

    def run(order):
        ents, comps = cluster(mentions[order], (entities, ids), k=3, threshold=0.5)
        out = nil_cluster_ids(comps, ents, [keys[i] for i in order])
        back = [None] * len(order)
        for pos, i in enumerate(order):
            back[i] = out[pos]
        return back

    first = run(np.arange(24))
    assert any(x.startswith("NIL:") for x in first) and any(not x.startswith("NIL:") for x in first)
    assert run(np.arange(24)) == first
    for seed in range(3):
        assert run(np.random.default_rng(seed).permutation(24)) == first


# ---------------------------------------------------------------- over docs
TEXT = "Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn"


def make_doc(nlp, text=TEXT, spans=((0, 2, "Chemical"), (4, 6, "Disease"), (7, 9, "Disease"))):
    doc = nlp.make_doc(text)
    doc.ents = [Span(doc, a, b, label=l) for a, b, l in spans]
    return doc


def test_discover_writes_kb_ids(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    docs = [make_doc(nlp), nlp.make_doc("nothing here"), make_doc(nlp, "aspirin or warfarin", ((0, 1, "Chemical"), (2, 3, "Chemical")))]
    counts = discover(nlp, docs, k=2, threshold=2.0)  # cosine < 2: every mention is its own NIL cluster
    assert counts == {"mentions": 5, "linked": 0, "nil_clusters": 5, "nil_mentions": 5}
    assert [e.kb_id_ for e in docs[0].ents] == ["NIL:0", "NIL:1", "NIL:2"]  # a fresh doc.ents reads them back
    assert [e.kb_id_ for e in docs[2].ents] == ["NIL:3", "NIL:4"]
    assert [e.label_ for e in docs[0].ents] == ["Chemical", "Disease", "Disease"]
    assert docs[0][0].ent_kb_id_ == "NIL:0"
    counts = discover(nlp.get_pipe("pel_linker"), docs, k=2, threshold=-np.inf)
    assert counts["linked"] == 5 and counts["nil_clusters"] == 0
    assert all(e.kb_id_.startswith("D") for d in docs for e in d.ents)


def test_cli(kb_dir, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and "--kb" in result.output and "--k" in result.output
    nlp = spacy.blank("en")
    doc = make_doc(nlp)
    doc.spans[GOLD_KEY] = [Span(doc, s.start, s.end, label=s.label_, kb_id=i) for s, i in zip(doc.ents, ["D1", "D2", "NIL"])]
    write_docbin([doc], tmp_path / "in.spacy")
    result = runner.invoke(app, [str(tmp_path / "in.spacy"), str(tmp_path / "out.spacy"), "--kb", str(kb_dir), "--threshold", "2"])
    assert result.exit_code == 0, result.output
    assert '"nil_clusters": 3' in result.output and '"ari"' in result.output
    out = read_docbin(nlp, tmp_path / "out.spacy")[0]
    assert [s.kb_id_ for s in out.spans[GOLD_KEY]] == ["D1", "D2", "NIL"]  # gold kept
    assert [s.kb_id_ for s in out.ents] == ["NIL:0", "NIL:1", "NIL:2"]
    assert [s.kb_id_ for s in out.spans[DISCOVERED_KEY]] == ["NIL:0", "NIL:1", "NIL:2"]


# ---------------------------------------------------------------- ARI / NMI
def test_cluster_scores_known_values():
    assert cluster_scores([0, 0, 1, 1, 2], [0, 0, 1, 1, 2]) == {"ari": 1.0, "nmi": 1.0}
    assert cluster_scores(["a", "a", "b"], [None, None, "x"]) == {"ari": 1.0, "nmi": 1.0}  # names do not matter
    s = cluster_scores([0, 0, 1, 1], [0, 0, 1, 2])  # hand-computed: ARI = (1 - 1/3) / (3/2 - 1/3) = 4/7
    assert s["ari"] == pytest.approx(4 / 7, abs=1e-6) and s["nmi"] == pytest.approx(0.8, abs=1e-6)
    s = cluster_scores([0, 0, 1, 1], [0, 1, 0, 1])  # ARI = (0 - 2/3) / (2 - 2/3) = -1/2, independent: NMI 0
    assert s["ari"] == pytest.approx(-0.5) and s["nmi"] == pytest.approx(0.0)
    assert cluster_scores([0, 1, 2], [0, 1, 2]) == {"ari": 1.0, "nmi": 1.0}  # all singletons
    assert cluster_scores([0, 0, 0], [5, 5, 5]) == {"ari": 1.0, "nmi": 1.0}  # one cluster
    with pytest.raises(ValueError):
        cluster_scores([0], [0, 1])


def test_pel_discovery_pipeline_step_clusters_each_batch(kb_dir):
    import spacy as _spacy
    from spacy.tokens import Span as _Span

    nlp = _spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.add_pipe("pel_discovery", config={"threshold": 2.0, "batch_size": 2})  # 2.0: nothing links
    docs = []
    for text in ["aspirin helps", "aspirin hurts", "warfarin too"]:
        doc = nlp.make_doc(text)
        doc.ents = [_Span(doc, 0, 1, label="Chemical")]
        docs.append(doc)
    out = list(nlp.pipe(docs))
    ids = [d.ents[0].kb_id_ for d in out]
    assert all(i.startswith("NIL:") for i in ids)
    assert ids[2] == "NIL:0"  # the third doc is a batch of its own: numbering restarts per batch


def test_precomputed_nearest_entities_give_the_same_clusters():
    from spacy_pel.discovery.cluster import nearest_entities

    mentions = hand_mentions()
    near = nearest_entities(mentions, (ENTITY_VECS, ENTITY_IDS))
    for beta in (0.0, 0.3):
        a = cluster(mentions, (ENTITY_VECS, ENTITY_IDS), k=3, threshold=0.5, mention_margin=beta)
        b = cluster(mentions, (ENTITY_VECS, ENTITY_IDS), k=3, threshold=0.5, mention_margin=beta, nearest=near)
        assert a[0] == b[0] and list(a[1]) == list(b[1])
    with pytest.raises(ValueError, match="nearest entities"):
        cluster(mentions, (ENTITY_VECS, ENTITY_IDS), nearest=(near[0][:2], near[1][:2]))


# ---------------------------------------------------------------- command line: options checked, report honest
NIL_CLASSIFIER = {"@misc": "spacy_pel.nil.classifier.v1", "weights": {"top": 5.0}, "bias": -2.0}



def gold_corpus(path, ids=("D1", "D2", "NIL")):
    nlp = spacy.blank("en")
    doc = make_doc(nlp)
    doc.spans[GOLD_KEY] = [Span(doc, s.start, s.end, label=s.label_, kb_id=i) for s, i in zip(doc.ents, ids)]
    write_docbin([doc], path)
    return path


@pytest.fixture
def classifier_pipeline(kb_dir, tmp_path):
    """A saved pipeline whose linker decides NIL with a classifier (as a calibrated one): auto links with 'pipeline'."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "nil": NIL_CLASSIFIER, "threshold": 0.5})
    nlp.to_disk(tmp_path / "pipe")
    return tmp_path / "pipe"


def test_cli_pipeline_linking_refuses_the_options_it_does_not_use(classifier_pipeline, tmp_path):
    corpus, out = gold_corpus(tmp_path / "in.spacy"), tmp_path / "out.spacy"
    base = [str(corpus), str(out), "--pipeline", str(classifier_pipeline)]
    runner = CliRunner()
    for extra, option in ((["--threshold", "0.5"], "--threshold"), (["--mention-margin", "0.3"], "--mention-margin"),
                          (["--linking", "pipeline", "--threshold", "0.99"], "--threshold"),
                          (["--linking", "pipeline", "--mention-margin", "0.9"], "--mention-margin")):
        one_line_error(runner.invoke(app, base + extra), option, "--linking pipeline")
        assert not out.exists()
    result = runner.invoke(app, base + ["--mention-threshold", "0.9"])  # what pipeline linking does take
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["linking"] == "pipeline" and report["mention_threshold"] == 0.9
    assert "threshold" not in report and "mention_margin" not in report  # only what was applied is reported
    # clustering inference takes them, and reports them
    result = runner.invoke(app, base + ["--linking", "cluster", "--threshold", "2", "--mention-margin", "0.1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["threshold"], report["mention_threshold"], report["mention_margin"]) == (2.0, 2.0, 0.1)
    # the help says which mode uses which option
    helps = {p.name: p.help for p in typer.main.get_command(app).params}
    assert "--linking pipeline: default none" in helps["mention_threshold"]
    assert helps["threshold"].startswith("Clustering inference only") and helps["mention_margin"].startswith("Clustering inference only")
    assert "--mention-threshold alone" in discover_cli.HELP


def test_library_pipeline_linking_refuses_a_threshold(classifier_pipeline):
    nlp = spacy.load(classifier_pipeline)
    docs = [make_doc(nlp)]
    with pytest.raises(ValueError, match="threshold"):
        discover(nlp, docs, k=2, threshold=0.5)  # auto → pipeline: the edge floor would be ignored
    assert discover(nlp, docs, k=2, mention_threshold=0.9)["mentions"] == 3


@pytest.mark.parametrize("option, value", [("--threshold", "nan"), ("--mention-threshold", "nan"), ("--mention-margin", "nan"),
                                           ("--threshold", "inf"), ("--mention-margin", "inf"), ("--mention-margin", "-0.1")])
def test_cli_refuses_non_finite_and_out_of_range_floats(kb_dir, tmp_path, option, value):
    corpus = gold_corpus(tmp_path / "in.spacy")
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "out.spacy"), "--kb", str(kb_dir), option, value])
    one_line_error(result, option)
    assert not (tmp_path / "out.spacy").exists()


def test_library_refuses_nan_floors(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    for kwargs in ({"threshold": float("nan")}, {"mention_threshold": float("nan")}, {"mention_margin": float("nan")}):
        with pytest.raises(ValueError, match="NaN"):
            discover(nlp, [make_doc(nlp)], k=2, **kwargs)
        with pytest.raises(ValueError, match="NaN"):
            cluster(hand_mentions(), (ENTITY_VECS, ENTITY_IDS), k=3, **kwargs)


def test_cli_refuses_an_output_that_is_a_folder_before_linking(kb_dir, tmp_path, monkeypatch):
    corpus = gold_corpus(tmp_path / "in.spacy")
    (tmp_path / "out.spacy").mkdir()

    def no_linking(*args, **kwargs):
        raise AssertionError("the pipeline was loaded before the output was checked")

    monkeypatch.setattr(discover_cli, "load_pipeline", no_linking)
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "out.spacy"), "--kb", str(kb_dir)])
    one_line_error(result, str(tmp_path / "out.spacy"), "folder")


def test_cli_warns_on_a_corpus_without_gold_mentions(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    write_docbin([nlp.make_doc("nothing here")], tmp_path / "in.spacy")
    result = CliRunner().invoke(app, [str(tmp_path / "in.spacy"), str(tmp_path / "out.spacy"), "--kb", str(kb_dir)])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and "no gold mentions" in result.stderr
    assert json.loads(result.stdout)["mentions"] == 0
