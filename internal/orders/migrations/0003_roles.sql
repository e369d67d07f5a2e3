-- Least privilege: the services never own what they write. The role that
-- migrates owns the tables; each service connects as a role (or a login
-- role that is a member of it) that may do only its own work, on rows only:
--
--   usher_orderworker  orders: SELECT, INSERT, UPDATE; stock: SELECT, UPDATE
--   usher_gateway      stock: SELECT, INSERT, UPDATE (the admin stock endpoint)
--   usher_admitter     stock: SELECT (stock-aware admission)
--
-- and each may read schema_migrations, to see that the schema is current.
-- None may DELETE, TRUNCATE, DROP, ALTER, CREATE or GRANT. The roles are
-- created NOLOGIN when missing (which takes CREATEROLE); a DBA may create
-- them first, and the owner then needs no more than owning the database.
-- A table a later migration adds is granted in that same migration.
DO $$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['usher_orderworker', 'usher_gateway', 'usher_admitter'] LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN', r);
      EXCEPTION
        -- Another database of the cluster migrating at the same instant.
        WHEN duplicate_object OR unique_violation THEN NULL;
        WHEN insufficient_privilege THEN
          RAISE EXCEPTION 'role % does not exist and % may not create it', r, current_user
            USING HINT = 'create the roles usher_orderworker, usher_gateway and usher_admitter (NOLOGIN) as a superuser first, or migrate as a role with CREATEROLE';
      END;
    END IF;
  END LOOP;
END
$$;

REVOKE ALL ON orders, stock, schema_migrations FROM PUBLIC;

GRANT SELECT, INSERT, UPDATE ON orders TO usher_orderworker;
GRANT SELECT, UPDATE ON stock TO usher_orderworker;
GRANT SELECT, INSERT, UPDATE ON stock TO usher_gateway;
GRANT SELECT ON stock TO usher_admitter;
GRANT SELECT ON schema_migrations TO usher_orderworker, usher_gateway, usher_admitter;
