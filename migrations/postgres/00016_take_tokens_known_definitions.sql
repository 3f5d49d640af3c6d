-- sluice_take_tokens, second form: the first (migration 00015) with one more argument, p_known,
-- and one more column, def_version, so that the group's rows need not each carry the limit's
-- definition back (internal/limiter/group_onetrip_pg.go). Everything else is as 00015 describes.
--
-- A definition's version is the transaction that wrote its row (xmin, as a bigint): any write
-- (an update, a delete and re-create, a statement run by hand, an older release) gives the row
-- a new one, and two committed versions of a row never share one. p_known[i] is the version of
-- the definition the caller holds for request i's limit (0 or NULL: it holds none). Each limit's
-- definition comes back once, with its version, on the first of its rows in the order decided,
-- and only when the stored version differs from p_known; every other row's def and def_version
-- are NULL, and the caller decides with the very definition the function found.
--
-- A group of one request is taken as it comes: there is nothing to sort. What this saves is
-- mostly the engine's: scanning 22 columns per row (docs/performance.md); PostgreSQL's CPU per
-- call did not change measurably.
--
-- The first form stays, unchanged, for the previous release's instances during an upgrade:
-- they report not ready once the schema is newer than theirs, but may still be finishing
-- requests. A later release can drop it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION sluice_take_tokens(
    p_now bigint, p_tenant bigint[], p_name text[], p_key text[],
    p_count float8[], p_reserve boolean[], p_consume boolean[], p_known bigint[])
RETURNS TABLE (ord int, now_ms bigint, ok boolean, existed boolean, pre_value float8, pre_ts bigint,
               pre_penalty bigint, post_value float8, post_ts bigint, def_version bigint, def limit_definitions)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    t         bigint := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    n         int := coalesce(cardinality(p_tenant), 0);
    perm      int[];
    defs      limit_definitions[];
    one       limit_definitions;
    found_def record;
    versions  bigint[];
    send_def  boolean;
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
            SELECT d AS def, d.xmin::text::bigint AS version INTO found_def
                FROM limit_definitions d WHERE d.tenant_id = p_tenant[i] AND d.name = p_name[i];
            one := found_def.def;
            IF NOT FOUND OR one.kind NOT IN ('token bucket', 'gcra') OR one.shards <> 1 OR one.parents <> ''
                OR one.penalty <> 0 OR one.overrides_version <> 0 OR one.rate < 1e-290 THEN
                RETURN; -- not this function's case: nothing written, nothing returned
            END IF;
        END IF;
        defs[i] := one;
        versions[i] := found_def.version;
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
        send_def := new_limit AND p_known[i] IS DISTINCT FROM versions[i];
        def := CASE WHEN send_def THEN lim END;
        def_version := CASE WHEN send_def THEN versions[i] END;
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
DROP FUNCTION sluice_take_tokens(bigint, bigint[], text[], text[], float8[], boolean[], boolean[], bigint[]);
