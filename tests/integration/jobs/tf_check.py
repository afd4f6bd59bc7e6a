"""A 2-worker TF MultiWorkerMirroredStrategy job: one training step from ckit's TF_CONFIG; both workers must end
with the same weights (one JSON line per worker)."""

import json
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

config = json.loads(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = config["task"]["index"]
with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
x = np.full((8, 4), float(index + 1), dtype="float32")
y = np.zeros((8, 2), dtype="float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).with_options(options)
model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
weights = np.concatenate([w.flatten() for w in model.get_weights()])
print("CKIT-RESULT " + json.dumps({
    "rank": index, "world": len(config["cluster"]["worker"]), "host": socket.gethostname(),
    "workers": config["cluster"]["worker"], "params": [round(float(v), 5) for v in weights]}), flush=True)
