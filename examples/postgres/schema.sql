CREATE TABLE IF NOT EXISTS orders (
  id         text PRIMARY KEY,
  version    integer NOT NULL,
  status     text NOT NULL,
  written_at timestamptz NOT NULL
);
