-- Dashboard sessions are signed with the epoch in force when they were made: signing out raises
-- it, on every instance at once, so every session made before (a stolen cookie too) ends.
CREATE TABLE dashboard_sessions (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch BIGINT NOT NULL
);
INSERT INTO dashboard_sessions (id, epoch) VALUES (1, 0);
