/**
 * services/packages (the door of this domain: other domains and the layers above import only this file)
 */
export * from './packages.js';
