/**
 * services/repohost (the door of this domain: other domains and the layers above import only this file)
 */
export * from './actions.js';
export * from './host.js';
