-- sluice_take_tokens, fourth body: 00023's (read that file, and 00016's for what the function
-- decides and returns), with one change in how a row is written:
--
-- - A row the read did not find is written by a plain INSERT, where 00023's body ran
--   INSERT … ON CONFLICT DO UPDATE for it: the speculative insertion behind ON CONFLICT (a
--   conflict check before the insert, and its confirmation after) is work a row that was not there
--   does not need. Should another transaction insert the same row after this one's snapshot (two
--   instances' first decisions on one key), the insert fails: with a serialization failure
--   (40001) when the other transaction had read the key too, as every decision does (PostgreSQL
--   reports the conflict of two serializable transactions before the unique violation), and with
--   a unique violation (23505) when it inserted without reading; the upsert failed with 40001.
--   The engine retries both (internal/db, isRetryable), and nothing is answered from the failed
--   call.
-- - Stored rows are written as in 00023: by ctid when not full, by the upsert when full (the
--   sweeper may delete a full row between the read and the write).
--
-- Measured with pgbench (one client, synchronous_commit off, the function alone, PostgreSQL's
-- CPU per call in alternating rounds; docs/performance.md, 2026-11-28, session 15): groups of
-- 16 new keys 0.84–1.05 times 00023's CPU (median of 6 rounds about 0.9); stored rows take the
-- same statements as before.
--
-- The signature is unchanged, so instances of the previous release call this body during an
-- upgrade and get the same rows.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sluice_take_tokens(
    p_now bigint, p_tenant bigint[], p_name text[], p_key text[],
    p_count float8[], p_reserve boolean[], p_consume boolean[], p_known bigint[])
RETURNS TABLE (ord int, now_ms bigint, ok boolean, existed boolean, pre_value float8, pre_ts bigint,
               pre_penalty bigint, post_value float8, post_ts bigint, def_version bigint, def limit_definitions)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    t         bigint := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    n         int := coalesce(cardinality(p_tenant), 0);
    perm      int[];
    one       limit_definitions;
    found_def record;
    -- Per request (by its place in the arguments): the definition and its version to send back
    -- (NULL but on a limit's first request, and then only if the caller's copy is another one),
    -- and the definition's numbers.
    sends     limit_definitions[];
    versions  bigint[];
    rates     float8[];
    periods   float8[];
    caps      float8[];
    reserves  float8[];
    capacity  float8;
    reserve   float8;
    i         int;
    j         int;
    e         boolean;
    v         float8;
    ts0       bigint;
    pen       bigint;
    stored_at tid;
    stored    boolean; -- the row was found by the read
    changed   boolean := false;
    avail     float8;
    rest      float8;
    new_ts    bigint;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF array_position(p_tenant, NULL) IS NOT NULL OR array_position(p_name, NULL) IS NOT NULL
        OR array_position(p_key, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'sluice_take_tokens: a NULL tenant, name or key' USING ERRCODE = '22004';
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
            -- The definition goes back once per limit, and only if the caller's copy is not this one.
            IF p_known[i] IS DISTINCT FROM found_def.version THEN
                sends[i] := one;
                versions[i] := found_def.version;
            END IF;
            -- + 0 reads a capacity of -0 as +0, as the engine's Normalized does.
            capacity := coalesce(one.capacity, one.rate) + 0;
            reserve := coalesce(one.max_reserved, 'Infinity'::float8);
        END IF;
        rates[i] := one.rate; periods[i] := one.period; caps[i] := capacity; reserves[i] := reserve;
        j := i;
    END LOOP;
    now_ms := t;
    -- One pass more than there are requests: the last only writes the last row.
    FOR x IN 1 .. n + 1 LOOP
        i := perm[x]; -- NULL past the end
        IF x > n OR x = 1 OR p_tenant[i] <> p_tenant[j] OR p_name[i] <> p_name[j] OR p_key[i] <> p_key[j] THEN
            IF changed AND stored_at IS NOT NULL THEN -- the previous row is done: write it (by ctid, or as below)
                UPDATE limit_state SET value = v, ts = ts0, counters = '', penalty_until = 0 WHERE ctid = stored_at;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'sluice_take_tokens: the row of key % moved before its write', p_key[j]
                        USING ERRCODE = '40001';
                END IF;
            ELSIF changed AND NOT stored THEN -- no row at the read: a plain insert
                INSERT INTO limit_state (tenant_id, name, key, shard, value, ts, counters, penalty_until)
                    VALUES (p_tenant[j], p_name[j], p_key[j], 0, v, ts0, '', 0);
            ELSIF changed THEN
                INSERT INTO limit_state AS st (tenant_id, name, key, shard, value, ts, counters, penalty_until)
                    VALUES (p_tenant[j], p_name[j], p_key[j], 0, v, ts0, '', 0)
                    ON CONFLICT (tenant_id, name, key, shard) DO UPDATE
                    SET value = excluded.value, ts = excluded.ts, counters = excluded.counters,
                        penalty_until = excluded.penalty_until;
            END IF;
            EXIT WHEN x > n;
            -- No row: every target NULL, stored_at too.
            SELECT st.value, st.ts, st.penalty_until, st.ctid INTO v, ts0, pen, stored_at FROM limit_state st
                WHERE st.tenant_id = p_tenant[i] AND st.name = p_name[i] AND st.key = p_key[i] AND st.shard = 0;
            e := FOUND; stored := FOUND; changed := false;
            -- A full row is written by key (above); its numbers are those of the row's first request.
            IF e AND pen <= t AND v + (greatest(t, ts0) - ts0)::float8 * rates[i] / periods[i] >= caps[i] THEN
                stored_at := NULL;
            END IF;
        END IF;
        j := i;
        ord := i;
        def := sends[i];
        def_version := versions[i];
        existed := e;
        IF e THEN
            pre_value := v; pre_ts := ts0; pre_penalty := pen;
            -- viewTokenBucket: a stored ts ahead of now counts as now; multiply before dividing.
            new_ts := greatest(t, ts0);
            avail := least(v + (new_ts - ts0)::float8 * rates[i] / periods[i], caps[i]);
        ELSE
            pre_value := NULL; pre_ts := NULL; pre_penalty := NULL;
            new_ts := t;
            avail := caps[i];
        END IF;
        rest := avail - p_count[i];
        -- decide: admitted when the count fits, or when a reservation's deficit is allowed;
        -- a running penalty (left by an earlier definition) refuses everything.
        ok := (rest >= 0 OR (p_reserve[i] AND -rest <= reserves[i])) AND NOT (e AND pen > t);
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sluice_take_tokens(
    p_now bigint, p_tenant bigint[], p_name text[], p_key text[],
    p_count float8[], p_reserve boolean[], p_consume boolean[], p_known bigint[])
RETURNS TABLE (ord int, now_ms bigint, ok boolean, existed boolean, pre_value float8, pre_ts bigint,
               pre_penalty bigint, post_value float8, post_ts bigint, def_version bigint, def limit_definitions)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    t         bigint := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    n         int := coalesce(cardinality(p_tenant), 0);
    perm      int[];
    one       limit_definitions;
    found_def record;
    -- Per request (by its place in the arguments): the definition and its version to send back
    -- (NULL but on a limit's first request, and then only if the caller's copy is another one),
    -- and the definition's numbers.
    sends     limit_definitions[];
    versions  bigint[];
    rates     float8[];
    periods   float8[];
    caps      float8[];
    reserves  float8[];
    capacity  float8;
    reserve   float8;
    i         int;
    j         int;
    e         boolean;
    v         float8;
    ts0       bigint;
    pen       bigint;
    stored_at tid;
    changed   boolean := false;
    avail     float8;
    rest      float8;
    new_ts    bigint;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF array_position(p_tenant, NULL) IS NOT NULL OR array_position(p_name, NULL) IS NOT NULL
        OR array_position(p_key, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'sluice_take_tokens: a NULL tenant, name or key' USING ERRCODE = '22004';
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
            -- The definition goes back once per limit, and only if the caller's copy is not this one.
            IF p_known[i] IS DISTINCT FROM found_def.version THEN
                sends[i] := one;
                versions[i] := found_def.version;
            END IF;
            -- + 0 reads a capacity of -0 as +0, as the engine's Normalized does.
            capacity := coalesce(one.capacity, one.rate) + 0;
            reserve := coalesce(one.max_reserved, 'Infinity'::float8);
        END IF;
        rates[i] := one.rate; periods[i] := one.period; caps[i] := capacity; reserves[i] := reserve;
        j := i;
    END LOOP;
    now_ms := t;
    -- One pass more than there are requests: the last only writes the last row.
    FOR x IN 1 .. n + 1 LOOP
        i := perm[x]; -- NULL past the end
        IF x > n OR x = 1 OR p_tenant[i] <> p_tenant[j] OR p_name[i] <> p_name[j] OR p_key[i] <> p_key[j] THEN
            IF changed AND stored_at IS NOT NULL THEN -- the previous row is done: write it (a full one by key)
                UPDATE limit_state SET value = v, ts = ts0, counters = '', penalty_until = 0 WHERE ctid = stored_at;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'sluice_take_tokens: the row of key % moved before its write', p_key[j]
                        USING ERRCODE = '40001';
                END IF;
            ELSIF changed THEN
                INSERT INTO limit_state AS st (tenant_id, name, key, shard, value, ts, counters, penalty_until)
                    VALUES (p_tenant[j], p_name[j], p_key[j], 0, v, ts0, '', 0)
                    ON CONFLICT (tenant_id, name, key, shard) DO UPDATE
                    SET value = excluded.value, ts = excluded.ts, counters = excluded.counters,
                        penalty_until = excluded.penalty_until;
            END IF;
            EXIT WHEN x > n;
            -- No row: every target NULL, stored_at too.
            SELECT st.value, st.ts, st.penalty_until, st.ctid INTO v, ts0, pen, stored_at FROM limit_state st
                WHERE st.tenant_id = p_tenant[i] AND st.name = p_name[i] AND st.key = p_key[i] AND st.shard = 0;
            e := FOUND; changed := false;
            -- A full row is written by key (above); its numbers are those of the row's first request.
            IF e AND pen <= t AND v + (greatest(t, ts0) - ts0)::float8 * rates[i] / periods[i] >= caps[i] THEN
                stored_at := NULL;
            END IF;
        END IF;
        j := i;
        ord := i;
        def := sends[i];
        def_version := versions[i];
        existed := e;
        IF e THEN
            pre_value := v; pre_ts := ts0; pre_penalty := pen;
            -- viewTokenBucket: a stored ts ahead of now counts as now; multiply before dividing.
            new_ts := greatest(t, ts0);
            avail := least(v + (new_ts - ts0)::float8 * rates[i] / periods[i], caps[i]);
        ELSE
            pre_value := NULL; pre_ts := NULL; pre_penalty := NULL;
            new_ts := t;
            avail := caps[i];
        END IF;
        rest := avail - p_count[i];
        -- decide: admitted when the count fits, or when a reservation's deficit is allowed;
        -- a running penalty (left by an earlier definition) refuses everything.
        ok := (rest >= 0 OR (p_reserve[i] AND -rest <= reserves[i])) AND NOT (e AND pen > t);
        IF ok AND p_consume[i] THEN
            e := true; v := rest; ts0 := new_ts; pen := 0; changed := true;
        END IF;
        post_value := CASE WHEN e THEN v END; post_ts := CASE WHEN e THEN ts0 END;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd
