"""No SQL input takes the node down: statements too deep, too many or too
large are answered 400 or 413 naming the limit they hit, and the node serves
on. Expressions at the limits are evaluated where the rows are (on every
shard that owns a partition)."""
import random

from confluent_kafka import Producer

from test_tables import rows, sql

# core/src/sql/bounds.rs and net/src/server.rs
MAX_NESTING = 128
MAX_STATEMENTS = 1000
MAX_SQL_BODY = 1 << 20


def chain(n, term="1", op=" + "):
    return op.join([term] * n)


def nest(n, shape, inner="1"):
    e = inner
    for _ in range(n):
        e = shape.replace("@", e)
    return e


def serves(node):
    assert node.proc.poll() is None, "weir exited:\n" + "".join(node.log[-30:])
    assert rows(node, "SELECT 1 + 1 AS two") == [{"two": 2}]


def test_a_long_flat_chain_is_refused_and_the_node_serves_on(node):
    # 3,000 terms overflowed a shard's stack and aborted the process.
    for n in (3000, 100_000):
        status, body = sql(node, "SELECT " + chain(n))
        assert status == 400, body
        assert f"the limit is {MAX_NESTING}" in body["error"], body
        serves(node)
    status, body = sql(node, "SELECT " + chain(100))
    assert status == 200 and list(body[0].values()) == [100], body


def test_deep_nesting_of_every_shape_is_refused_at_the_limit(node):
    shapes = ["(@)", "abs(@)", "- @", "NOT @", "@ IS NULL", "@::int", "CASE WHEN @ THEN 1 END",
              "coalesce(@, 1)", "@ + 1", "1 + (@)"]
    for shape in shapes:
        for n in (MAX_NESTING, MAX_NESTING * 4, 5000):
            status, body = sql(node, "SELECT " + nest(n, shape))
            assert status == 400, (shape, n, body)
            assert "limit" in body["error"], body
        serves(node)


def test_too_many_statements_and_too_large_bodies(node):
    status, body = sql(node, "SELECT 1;" * (MAX_STATEMENTS + 1))
    assert status == 400 and f"the limit is {MAX_STATEMENTS}" in body["error"], body
    assert rows(node, "SELECT 1 AS a;" * MAX_STATEMENTS) == [{"a": 1}]
    status, body = sql(node, "SELECT 1;" * 100_000)
    assert status == 400 and "100000 statements" in body["error"], body
    # 100,000 statements in 1.2 MB, and 50 MB: both over the body limit,
    # answered (the node reads what the client still sends before closing).
    for body_text in ("SELECT 1234;" * 100_000, "SELECT " + "1" * (50 << 20)):
        status, body = sql(node, body_text)
        assert status == 413, body
        assert f"the limit is {MAX_SQL_BODY} bytes" in body["error"], body
    serves(node)


def test_expressions_at_the_limit_are_evaluated_on_every_shard(node):
    # A table with a partition on each shard: WHERE runs where rows are.
    assert sql(node, "CREATE TABLE deep (id BIGINT PRIMARY KEY, v BIGINT) WITH (partitions = 4)")[0] == 200
    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(40):
        p.produce("deep", key=b'{"id": %d}' % i, value=b'{"id": %d, "v": %d}' % (i, i % 5))
    assert p.flush(30) == 0
    # The longest OR chain accepted: its depth is right under the limit.
    n = 1
    while sql(node, "SELECT count(*) AS c FROM deep WHERE " + chain(n + 1, "v = 3", " OR "))[0] == 200:
        n += 1
    assert n >= 40, f"only {n} ORed comparisons are accepted"
    assert rows(node, "SELECT count(*) AS c FROM deep WHERE " + chain(n, "v = 3", " OR ")) == [{"c": 8}]
    status, body = sql(node, "SELECT count(*) AS c FROM deep WHERE " + chain(n + 1, "v = 3", " OR "))
    assert status == 400 and "limit" in body["error"], body
    # Arithmetic chains at the limit, evaluated per row on the owners.
    m = 1
    while sql(node, "SELECT id FROM deep WHERE id = 7 AND v + " + chain(m + 1, "0", " + ") + " = 2")[0] == 200:
        m += 1
    assert m >= MAX_NESTING // 2, f"only {m} terms are accepted"
    assert rows(node, "SELECT id FROM deep WHERE id = 7 AND v + " + chain(m, "0", " + ") + " = 2") == [{"id": 7}]
    serves(node)


def test_random_shapes_at_and_past_the_limits(node):
    """A fuzz of the SQL path (parse, plan, evaluate) over the network:
    random mixtures of chains, prefixes, postfixes, groups and calls of
    random sizes around the limit. Each is answered (200 or 400) and the
    node serves on."""
    rng = random.Random(1234)
    assert sql(node, "CREATE TABLE f (id BIGINT PRIMARY KEY, v BIGINT)")[0] == 200
    pieces = [("@ + 1", None), ("@ AND true", None), ("(@)", None), ("abs(@)", None), ("NOT @", None),
              ("- @", None), ("@ IS NULL", None), ("@ BETWEEN 1 AND 2", None), ("@ IN (1, 2)", None),
              ("CASE WHEN @ THEN 1 ELSE 2 END", None), ("coalesce(@, v)", None), ("@::bigint", None)]
    statuses = set()
    for _ in range(150):
        e = rng.choice(["1", "v", "id", "'x'"])
        for _ in range(rng.choice([5, 50, MAX_NESTING // 2, MAX_NESTING, MAX_NESTING * 3])):
            e = rng.choice(pieces)[0].replace("@", e)
        where = rng.choice(["SELECT {} FROM f", "SELECT id FROM f WHERE {}", "SELECT count(*) FROM f GROUP BY {}",
                            "SELECT id FROM f ORDER BY {} LIMIT 3"])
        status, body = sql(node, where.format(e))
        assert status in (200, 400), (status, body)
        statuses.add(status)
        if status == 400:
            assert body["error"], body
    assert statuses == {200, 400}, statuses
    serves(node)
