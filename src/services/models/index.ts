/**
 * services/models (the door of this domain: other domains and the layers above import only this file)
 */
export * from './catalog.js';
export * from './checks.js';
export * from './gateway-client.js';
export * from './price-list.js';
export * from './profiles.js';
export * from './spend.js';
