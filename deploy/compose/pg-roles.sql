-- The PostgreSQL roles of compose.yaml and make run (scripts/run.sh), made as a DBA would (the superuser),
-- at every start: usher_owner owns database usher and its tables and
-- migrates them (usherctl migrate); each service logs in as its own role,
-- which the migrations grant only its rows' work
-- (internal/orders/migrations/0003_roles.sql, docs/security.md).
-- Idempotent, so a data folder from before these roles is moved to them.
DO $$
DECLARE r text; t text;
BEGIN
  FOREACH r IN ARRAY ARRAY['usher_owner', 'usher_orderworker', 'usher_gateway', 'usher_admitter'] LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('CREATE ROLE %I', r);
    END IF;
    EXECUTE format('ALTER ROLE %I LOGIN', r);
  END LOOP;
  FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tableowner <> 'usher_owner' LOOP
    EXECUTE format('ALTER TABLE public.%I OWNER TO usher_owner', t);
  END LOOP;
END
$$;
ALTER DATABASE usher OWNER TO usher_owner;
