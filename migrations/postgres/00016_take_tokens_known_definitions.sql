-- sluice_take_tokens, second form: the first (migration 00015) with one more argument, p_known,
-- so that the group's rows need not each carry the limit's definition back
-- (internal/limiter/group_onetrip_pg.go). Everything else is as 00015 describes.
--
-- p_known[i] is the updated_at of the definition the caller holds for request i's limit (NULL:
-- it holds none). Each limit's definition now comes back once, on the first of its rows in the
-- order decided, and only when the stored one's updated_at differs from p_known; every other
-- row's def is NULL. updated_at is the definition's version: every change writes it (as the
-- sweeper's deletion relies on too). The caller decides with the definition it holds only when
-- the function found that very one, and if the two ever differ anyway, the engine's replay of
-- the group fails it closed.
--
-- A group of one request is taken as it comes: there is nothing to sort. Measured with pgbench
-- (one client, fsync off, PostgreSQL's CPU per transaction, 8 and 6 alternating pairs): one
-- request 187 -> 175 us, fourteen requests on one limit about 830 -> 600 us.
--
-- The first form stays, unchanged, for instances of the previous release still running during
-- an upgrade (they return its rows as before); a later release can drop it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION sluice_take_tokens(
    p_now bigint, p_tenant bigint[], p_name text[], p_key text[],
    p_count float8[], p_reserve boolean[], p_consume boolean[], p_known timestamptz[])
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
    lim       limit_definitions;
    new_limit boolean;
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
    IF n = 1 THEN
        perm := ARRAY[1];
    ELSE
        SELECT array_agg(u.o::int ORDER BY u.t, u.n COLLATE "C", u.k COLLATE "C", u.o) INTO perm
            FROM unnest(p_tenant, p_name, p_key) WITH ORDINALITY AS u(t, n, k, o);
    END IF;
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
        new_limit := x = 1 OR p_tenant[i] <> p_tenant[j] OR p_name[i] <> p_name[j];
        IF x > n OR new_limit OR p_key[i] <> p_key[j] THEN
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
        lim := defs[i];
        -- The definition goes back once per limit, and only if the caller's copy is not this one.
        def := CASE WHEN new_limit AND p_known[i] IS DISTINCT FROM lim.updated_at THEN lim END;
        -- + 0 reads a capacity of -0 as +0, as the engine's Normalized does.
        capacity := coalesce(lim.capacity, lim.rate) + 0;
        reserve := coalesce(lim.max_reserved, 'Infinity'::float8);
        existed := e;
        IF e THEN
            pre_value := v; pre_ts := ts0; pre_penalty := pen;
            -- viewTokenBucket: a stored ts ahead of now counts as now; multiply before dividing.
            new_ts := greatest(t, ts0);
            avail := least(v + (new_ts - ts0)::float8 * lim.rate / lim.period::float8, capacity);
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
DROP FUNCTION sluice_take_tokens(bigint, bigint[], text[], text[], float8[], boolean[], boolean[], timestamptz[]);
