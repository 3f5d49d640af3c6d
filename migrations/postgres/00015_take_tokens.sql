-- sluice_take_tokens decides a group of single-shard token bucket requests in the database, so
-- that the group's transaction is one round trip (internal/limiter/group_onetrip_pg.go): the
-- definitions, the state rows, the clock, the math's writes and the commit travel together.
-- It is the token bucket of internal/limiter/algo (viewTokenBucket and decide), operation for
-- operation in float8, so that it computes the very bits the Go code does; the engine replays
-- the group in Go from the states this returns and fails the group closed if they ever differ
-- (a property test compares the two on random inputs).
--
-- Arguments, one element per request, in the group's order: tenant, limit name, key, count,
-- reserve, consume. p_now is the decision time in ms (NULL: the database's clock, the
-- production case; tests freeze the engine's clock and pass it).
--
-- It decides only when every request's limit is a stored single-shard token bucket (or gcra)
-- without parents, penalty or overrides, with a rate of at least 1e-290. Otherwise it writes
-- nothing and returns no rows, and the engine decides the group the general way. Otherwise it
-- returns one row per request (ord: its place in the arrays, from 1; the rows come in the
-- order decided, not that one): the time, whether the request was admitted, the row's state
-- before it (as the requests before it in the group left it) and after it, and the limit's
-- definition (so that the group needs no other statement).
--
-- It takes the requests in primary-key order (bytewise, as the engine sorts its writes), in
-- arrival order within a row, which decides exactly as arrival order does (requests on
-- different rows do not affect each other): each row is read once and, if changed, written once,
-- and every group takes its row locks in the same order, so concurrent groups cannot deadlock.
-- Every lookup is by primary key: enable_seqscan is off inside it, as in the engine's other
-- group transactions (a generic plan made while a table was small must not become a scan).
-- Measured with pgbench against a set-based version (one statement for the definitions, one
-- for the rows, one upsert): these per-row statements cost PostgreSQL 4 to 6 times less CPU.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION sluice_take_tokens(
    p_now bigint, p_tenant bigint[], p_name text[], p_key text[],
    p_count float8[], p_reserve boolean[], p_consume boolean[])
RETURNS TABLE (ord int, now_ms bigint, ok boolean, existed boolean, pre_value float8, pre_ts bigint,
               pre_penalty bigint, post_value float8, post_ts bigint, def limit_definitions)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    t         bigint := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    n         int := coalesce(cardinality(p_tenant), 0);
    perm      int[];
    defs      limit_definitions[];
    one       limit_definitions;
    i         int;
    j         int;
    s         record;
    e         boolean;
    v         float8;
    ts0       bigint;
    pen       bigint;
    changed   boolean := false;
    capacity  float8;
    reserve   float8;
    avail     float8;
    rest      float8;
    new_ts    bigint;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    -- The requests in primary-key order (bytewise, as the engine sorts its writes), arrival
    -- order within a row: requests on different rows do not affect each other, so this decides
    -- exactly as arrival order does, and rows are read, then written, one after another in the
    -- order every group locks them.
    SELECT array_agg(u.o::int ORDER BY u.t, u.n COLLATE "C", u.k COLLATE "C", u.o) INTO perm
        FROM unnest(p_tenant, p_name, p_key) WITH ORDINALITY AS u(t, n, k, o);
    -- Every definition first (one lookup per limit): nothing is written unless all fit. Below a
    -- rate of 1e-290 the refill could underflow to zero, which float8 arithmetic raises as an
    -- error (Go rounds it to 0): the engine decides those (minOneTripRate).
    FOR x IN 1 .. n LOOP
        i := perm[x];
        IF x = 1 OR p_tenant[i] <> p_tenant[j] OR p_name[i] <> p_name[j] THEN
            SELECT * INTO one FROM limit_definitions d WHERE d.tenant_id = p_tenant[i] AND d.name = p_name[i];
            IF NOT FOUND OR one.kind NOT IN ('token bucket', 'gcra') OR one.shards <> 1 OR one.parents <> ''
                OR one.penalty <> 0 OR one.overrides_version <> 0 OR one.rate < 1e-290 THEN
                RETURN; -- not this function's case: nothing written, nothing returned
            END IF;
        END IF;
        defs[i] := one;
        j := i;
    END LOOP;
    now_ms := t;
    -- One pass more than there are requests: the last only writes the last row.
    FOR x IN 1 .. n + 1 LOOP
        i := perm[x]; -- NULL past the end
        IF x > n OR x = 1 OR p_tenant[i] <> p_tenant[j] OR p_name[i] <> p_name[j] OR p_key[i] <> p_key[j] THEN
            IF changed THEN -- the previous row is done: write it
                INSERT INTO limit_state AS st (tenant_id, name, key, shard, value, ts, counters, penalty_until)
                    VALUES (p_tenant[j], p_name[j], p_key[j], 0, v, ts0, '', 0)
                    ON CONFLICT (tenant_id, name, key, shard) DO UPDATE
                    SET value = excluded.value, ts = excluded.ts, counters = excluded.counters,
                        penalty_until = excluded.penalty_until;
            END IF;
            EXIT WHEN x > n;
            SELECT st.value, st.ts, st.penalty_until INTO s FROM limit_state st
                WHERE st.tenant_id = p_tenant[i] AND st.name = p_name[i] AND st.key = p_key[i] AND st.shard = 0;
            e := FOUND; v := s.value; ts0 := s.ts; pen := s.penalty_until; changed := false;
        END IF;
        j := i;
        ord := i;
        def := defs[i];
        -- + 0 reads a capacity of -0 as +0, as the engine's Normalized does.
        capacity := coalesce(def.capacity, def.rate) + 0;
        reserve := coalesce(def.max_reserved, 'Infinity'::float8);
        existed := e;
        IF e THEN
            pre_value := v; pre_ts := ts0; pre_penalty := pen;
            -- viewTokenBucket: a stored ts ahead of now counts as now; multiply before dividing.
            new_ts := greatest(t, ts0);
            avail := least(v + (new_ts - ts0)::float8 * def.rate / def.period::float8, capacity);
        ELSE
            pre_value := NULL; pre_ts := NULL; pre_penalty := NULL;
            new_ts := t;
            avail := capacity;
        END IF;
        rest := avail - p_count[i];
        -- decide: admitted when the count fits, or when a reservation's deficit is allowed;
        -- a running penalty (left by an earlier definition) refuses everything.
        ok := (rest >= 0 OR (p_reserve[i] AND -rest <= reserve)) AND NOT (e AND pen > t);
        IF ok AND p_consume[i] THEN
            e := true; v := rest; ts0 := new_ts; pen := 0; changed := true;
        END IF;
        post_value := CASE WHEN e THEN v END; post_ts := CASE WHEN e THEN ts0 END;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION sluice_take_tokens(bigint, bigint[], text[], text[], float8[], boolean[], boolean[]);
