-- One owner per cataloged resource: the first account to catalog a (URL, MCP tool) keeps it. An
-- account settling a payment to another seller's address could otherwise list that seller's URL
-- under descriptions of its own. Where two accounts hold the same resource, the earlier entry
-- stays.
DELETE FROM discovery_accepts WHERE resource_id IN (
    SELECT later.id FROM discovery_resources later
    WHERE EXISTS (
        SELECT 1 FROM discovery_resources earlier
        WHERE earlier.url = later.url AND earlier.tool_name = later.tool_name
          AND (earlier.created_at < later.created_at OR (earlier.created_at = later.created_at AND earlier.id < later.id))
    )
);
DELETE FROM discovery_resources WHERE EXISTS (
    SELECT 1 FROM discovery_resources earlier
    WHERE earlier.url = discovery_resources.url AND earlier.tool_name = discovery_resources.tool_name
      AND (earlier.created_at < discovery_resources.created_at
           OR (earlier.created_at = discovery_resources.created_at AND earlier.id < discovery_resources.id))
);
CREATE UNIQUE INDEX discovery_resources_owner ON discovery_resources (url, tool_name);

-- The list's `network` and `payTo` filters alone (the `scheme` filter has its index): the ways to
-- pay that match, then their entries.
CREATE INDEX discovery_accepts_network ON discovery_accepts (network, resource_id);
CREATE INDEX discovery_accepts_pay_to ON discovery_accepts (pay_to, resource_id);
