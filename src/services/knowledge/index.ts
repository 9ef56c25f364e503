/**
 * services/knowledge (the door of this domain: other domains and the layers above import only this file)
 */
export * from './ranking.js';
export * from './search.js';
export * from './store.js';
