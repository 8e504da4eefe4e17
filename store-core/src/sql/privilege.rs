//! The least-privilege check of the store's database role (`store/privilege.rs`).

/// The schema that holds the records, so the runtime role can name the objects in it.
pub const SCHEMA_SQL: &str = "SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'keyflight_records'::regclass";

/// What the current role can do beyond `RUNTIME_GRANTS`, one finding per row.
/// `$1` every granted object's name; `$2`, `$3`, `$4` the (object, kind, privilege) triples
/// the role must not have (`forbidden`). A superuser is reported as that alone; a role that
/// may act as an object's owner (owns it, or is a member of its owner) is reported as that,
/// not privilege by privilege. `CREATEROLE` counts as owning: such a role can make itself a
/// member of the owner.
pub const EXCESS_PRIVILEGES_SQL: &str = "
WITH me AS (
    SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user
), objects AS (
    SELECT o.name, c.relowner, c.relnamespace
      FROM unnest($1::text[]) AS o(name)
      JOIN pg_class c ON c.oid = to_regclass(o.name)
)
SELECT 'is a superuser' AS finding FROM me WHERE rolsuper
UNION ALL
SELECT 'may create roles, so may make itself the owner''s member' FROM me
 WHERE rolcreaterole AND NOT rolsuper
UNION ALL
SELECT format('may act as the owner of %s (%s)', name, pg_get_userbyid(relowner))
  FROM objects
 WHERE NOT (SELECT rolsuper FROM me) AND pg_has_role(relowner, 'MEMBER')
UNION ALL
SELECT format('may CREATE in schema %s', n.nspname)
  FROM pg_namespace n
 WHERE n.oid IN (SELECT relnamespace FROM objects)
   AND NOT (SELECT rolsuper FROM me) AND has_schema_privilege(n.oid, 'CREATE')
UNION ALL
SELECT format('may CREATE in database %s', current_database())
 WHERE NOT (SELECT rolsuper FROM me) AND has_database_privilege(current_database(), 'CREATE')
UNION ALL
SELECT format('may %s %s', f.privilege, f.name)
  FROM unnest($2::text[], $3::text[], $4::text[]) AS f(name, kind, privilege)
  JOIN objects o ON o.name = f.name
 WHERE NOT pg_has_role(o.relowner, 'MEMBER')
   AND CASE f.kind
           WHEN 'SEQUENCE' THEN has_sequence_privilege(to_regclass(f.name), f.privilege)
           ELSE has_table_privilege(to_regclass(f.name), f.privilege)
       END";

/// The rights of `RUNTIME_GRANTS` that role `$1` lacks after granting, one per row: a
/// granting role that has rights on an object but does not own it (nor holds the grant
/// option) gets only a warning from `GRANT`, not an error. `$2`, `$3`,
/// `$4` the (object, kind, privilege) triples of the list (`granted`).
pub const MISSING_GRANTS_SQL: &str = "
SELECT format('%s on %s', g.privilege, g.name) AS missing
  FROM unnest($2::text[], $3::text[], $4::text[]) AS g(name, kind, privilege)
 WHERE NOT COALESCE(CASE g.kind
           WHEN 'SEQUENCE' THEN has_sequence_privilege($1::text, to_regclass(g.name), g.privilege)
           WHEN 'FUNCTION' THEN has_function_privilege($1::text, to_regprocedure(g.name), g.privilege)
           ELSE has_table_privilege($1::text, to_regclass(g.name), g.privilege)
       END, false)";

/// The routed and partition functions (`keyflight_*`) the current role may act as the owner
/// of: it could rewrite what a statement does, or where the router sends it.
pub const FUNCTIONS_OWNED_SQL: &str = "
SELECT format('may act as the owner of %s (%s)', p.oid::regprocedure, pg_get_userbyid(p.proowner))
  FROM pg_proc p
 WHERE p.proname LIKE 'keyflight\\_%'
   AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
   AND pg_has_role(p.proowner, 'MEMBER')";

/// What the current role can do on a partitioned database's router beyond calling the
/// routed functions (whose owners [`FUNCTIONS_OWNED_SQL`] finds), one finding per row: a
/// superuser or a role that may create roles (as in [`EXCESS_PRIVILEGES_SQL`]), the owner
/// of the slot map (it could send a slot anywhere), and the right to create objects beside
/// the functions (a function of the same name earlier on the search path).
pub const ROUTER_EXCESS_SQL: &str = "
WITH me AS (
    SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user
)
SELECT 'is a superuser' AS finding FROM me WHERE rolsuper
UNION ALL
SELECT 'may create roles, so may make itself the owner''s member' FROM me
 WHERE rolcreaterole AND NOT rolsuper
UNION ALL
SELECT format('may act as the owner of the slot map %s (%s)', srvname, pg_get_userbyid(srvowner))
  FROM pg_foreign_server
 WHERE srvname = 'keyflight_partitions'
   AND NOT (SELECT rolsuper FROM me) AND pg_has_role(srvowner, 'MEMBER')
UNION ALL
SELECT format('may CREATE in schema %s', n.nspname)
  FROM pg_namespace n
 WHERE n.oid IN (SELECT pronamespace FROM pg_proc WHERE proname = 'keyflight_claim')
   AND NOT (SELECT rolsuper FROM me) AND has_schema_privilege(n.oid, 'CREATE')
UNION ALL
SELECT format('may CREATE in database %s', current_database())
 WHERE NOT (SELECT rolsuper FROM me) AND has_database_privilege(current_database(), 'CREATE')";

/// The role this connection runs as: `--grant-runtime` refuses to grant to itself.
pub const CURRENT_USER_SQL: &str = "SELECT current_user";
