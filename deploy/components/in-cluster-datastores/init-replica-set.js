// Initiates the engram MongoDB replica set. Safe to re-run: does nothing when the set already
// has a configuration, and always waits until member 0 is a writable primary.
// Runs under `mongosh --nodb`; credentials come from the environment, never from arguments.
const user = encodeURIComponent(process.env.MONGO_INITDB_ROOT_USERNAME);
const pass = encodeURIComponent(process.env.MONGO_INITDB_ROOT_PASSWORD);
const replSet = process.env.MONGO_REPLICA_SET;
const members = process.env.MONGO_MEMBERS.split(",");
const seed = `mongodb://${user}:${pass}@${members[0]}/admin` +
  "?directConnection=true&authSource=admin&serverSelectionTimeoutMS=5000";

function retry(what, fn, attempts, delayMs) {
  for (let i = 1; ; i++) {
    try {
      return fn();
    } catch (e) {
      if (i >= attempts) throw e;
      // Error names only: a message could echo connection details.
      print(`${what}: attempt ${i} failed (${e.codeName || e.name}); retrying`);
      sleep(delayMs);
    }
  }
}

// mongosh throws on command errors; normalise them to {ok: 0, code, codeName}.
function run(db, command) {
  try {
    return db.runCommand(command);
  } catch (e) {
    if (e.code === undefined) throw e;
    return { ok: 0, code: e.code, codeName: e.codeName };
  }
}

function commandError(result) {
  const e = new Error(`command failed: ${result.codeName}`);
  e.codeName = result.codeName;
  return e;
}

const admin = retry("connect", () => {
  const db = new Mongo(seed).getDB("admin");
  db.runCommand({ ping: 1 });
  return db;
}, 120, 5000);

const NOT_YET_INITIALIZED = 94;
const ALREADY_INITIALIZED = 23;
const status = run(admin, { replSetGetStatus: 1 });
if (status.ok === 1) {
  print(`replica set ${status.set} already initiated`);
} else if (status.code === NOT_YET_INITIALIZED) {
  const config = {
    _id: replSet,
    members: members.map((host, i) => ({ _id: i, host, priority: i === 0 ? 2 : 1 })),
  };
  // Fails its quorum check until every member is up, hence the retries.
  retry("replSetInitiate", () => {
    const result = run(admin, { replSetInitiate: config });
    if (result.ok !== 1 && result.code !== ALREADY_INITIALIZED) throw commandError(result);
  }, 120, 5000);
  print(`replica set ${replSet} initiated with ${members.length} members`);
} else {
  throw commandError(status);
}

retry("wait for primary", () => {
  const hello = run(admin, { hello: 1 });
  if (hello.isWritablePrimary !== true) throw new Error("no writable primary yet");
}, 150, 2000);
print("primary elected; replica set ready");
