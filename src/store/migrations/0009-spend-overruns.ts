import type { Migration } from '../migrations.js';

/**
 * Provider overruns (docs/spend.md): a settlement whose true usage passed its reservation keeps the
 * excess cost and tokens, so the owner sees it in the spend summary and REST.
 */
export const m0009: Migration = {
  version: 9,
  name: 'spend overruns',
  sql: `
    ALTER TABLE spend_reservations ADD COLUMN overrun_micros INTEGER;
    ALTER TABLE spend_reservations ADD COLUMN overrun_json TEXT;
    CREATE INDEX spend_reservations_overruns ON spend_reservations(day) WHERE overrun_json IS NOT NULL;
  `,
};
