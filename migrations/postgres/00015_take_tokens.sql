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
-- returns one row per request: the time, whether the request was admitted, the row's state
-- before it (as the requests before it in the group left it) and after it, and the limit's
-- definition (so that the group needs no other statement).
--
-- It reads every definition in one statement and every row in another, and writes every changed
-- row once, in one statement, in primary-key order (bytewise, as the engine's other groups):
-- concurrent groups take their row locks in the same order and do not deadlock. Every lookup is
-- by primary key: enable_seqscan is off inside it, as in the engine's other group transactions
-- (a generic plan made while a table was small must not become a scan).

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION sluice_take_tokens(
    p_now bigint, p_tenant bigint[], p_name text[], p_key text[],
    p_count float8[], p_reserve boolean[], p_consume boolean[])
RETURNS TABLE (now_ms bigint, ok boolean, existed boolean, pre_value float8, pre_ts bigint,
               pre_penalty bigint, post_value float8, post_ts bigint, def limit_definitions)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    t         bigint := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    n         int := coalesce(cardinality(p_tenant), 0);
    fits      boolean;
    defs      limit_definitions[];
    -- Per request i: prev, the request before it on the same row (NULL for the first);
    -- last, whether it is the last on its row; has, vals, tss, pens: the stored row, read for
    -- the first request on each row only.
    prev      int[];
    last      boolean[];
    has       boolean[];
    vals      float8[];
    tss       bigint[];
    pens      bigint[];
    -- The row as request i left it, and whether the group has changed it.
    cur_has   boolean[];
    cur_val   float8[];
    cur_ts    bigint[];
    cur_pen   bigint[];
    dirty     boolean[];
    e         boolean;
    v         float8;
    ts0       bigint;
    pen       bigint;
    changed   boolean;
    capacity  float8;
    reserve   float8;
    avail     float8;
    rest      float8;
    new_ts    bigint;
BEGIN
    -- Below a rate of 1e-290 the refill could underflow to zero, which float8 arithmetic raises
    -- as an error (Go rounds it to 0): the engine decides those (minOneTripRate).
    SELECT array_agg(d ORDER BY u.ord),
           bool_and(d.tenant_id IS NOT NULL AND d.kind IN ('token bucket', 'gcra') AND d.shards = 1
                    AND d.parents = '' AND d.penalty = 0 AND d.overrides_version = 0 AND d.rate >= 1e-290)
        INTO defs, fits
        FROM unnest(p_tenant, p_name) WITH ORDINALITY AS u(tenant_id, name, ord)
        LEFT JOIN limit_definitions d ON d.tenant_id = u.tenant_id AND d.name = u.name;
    IF n = 0 OR NOT fits THEN
        RETURN; -- not this function's case: nothing written, nothing returned
    END IF;
    SELECT array_agg(u.before ORDER BY u.ord), array_agg(u.after IS NULL ORDER BY u.ord),
           array_agg(s.tenant_id IS NOT NULL ORDER BY u.ord), array_agg(s.value ORDER BY u.ord),
           array_agg(s.ts ORDER BY u.ord), array_agg(s.penalty_until ORDER BY u.ord)
        INTO prev, last, has, vals, tss, pens
        FROM (SELECT r.*, lag(r.ord) OVER w AS before, lead(r.ord) OVER w AS after
                FROM unnest(p_tenant, p_name, p_key) WITH ORDINALITY AS r(tenant_id, name, key, ord)
                WINDOW w AS (PARTITION BY r.tenant_id, r.name, r.key ORDER BY r.ord)) u
        LEFT JOIN limit_state s ON u.before IS NULL AND s.tenant_id = u.tenant_id AND s.name = u.name
            AND s.key = u.key AND s.shard = 0;
    now_ms := t;
    FOR i IN 1 .. n LOOP
        def := defs[i];
        IF prev[i] IS NULL THEN
            e := has[i]; v := vals[i]; ts0 := tss[i]; pen := pens[i]; changed := false;
        ELSE
            e := cur_has[prev[i]]; v := cur_val[prev[i]]; ts0 := cur_ts[prev[i]];
            pen := cur_pen[prev[i]]; changed := dirty[prev[i]];
        END IF;
        capacity := coalesce(def.capacity, def.rate);
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
        cur_has[i] := e; cur_val[i] := v; cur_ts[i] := ts0; cur_pen[i] := pen; dirty[i] := changed;
        RETURN NEXT;
    END LOOP;
    INSERT INTO limit_state AS st (tenant_id, name, key, shard, value, ts, counters, penalty_until)
        SELECT p_tenant[i], p_name[i], p_key[i], 0, cur_val[i], cur_ts[i], '', 0
        FROM generate_subscripts(p_tenant, 1) AS i
        WHERE last[i] AND dirty[i]
        ORDER BY p_tenant[i], p_name[i] COLLATE "C", p_key[i] COLLATE "C"
        ON CONFLICT (tenant_id, name, key, shard) DO UPDATE
        SET value = excluded.value, ts = excluded.ts, counters = excluded.counters,
            penalty_until = excluded.penalty_until;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION sluice_take_tokens(bigint, bigint[], text[], text[], float8[], boolean[], boolean[]);
