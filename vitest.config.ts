import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Last check of the run: nothing the run mounted, attached or started may be left (test/global-setup.ts).
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // End-to-end files start their own service processes; two cores, so keep parallelism modest.
    maxWorkers: 2,
    reporters: process.env.CI ? ['default'] : ['default'],
  },
});
