"""A 2-worker TF MultiWorkerMirroredStrategy job: one training step from ckit's TF_CONFIG, the gradient averaged
across the workers by the strategy's all-reduce; both workers must end with the same weights (one JSON line each)."""

import json
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

config = json.loads(os.environ["TF_CONFIG"])
index = config["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    w = tf.Variable(tf.ones((4, 2)), name="w")
    b = tf.Variable(tf.zeros((2,)), name="b")


@tf.function
def train_step(x: tf.Tensor) -> tf.Tensor:
    def step(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(x, w) + b))
        grads = tape.gradient(loss, [w, b])
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, grads)
        for var, grad in zip([w, b], grads, strict=True):
            var.assign_sub(0.01 * grad)
        return loss
    return strategy.run(step, args=(x,))


train_step(tf.fill((8, 4), float(index + 1)))  # different data per worker: only the all-reduce makes them agree
params = [round(float(v), 5) for v in tf.concat([tf.reshape(w, [-1]), b], 0).numpy()]
print("CKIT-RESULT " + json.dumps({
    "rank": index, "world": len(config["cluster"]["worker"]), "host": socket.gethostname(),
    "workers": config["cluster"]["worker"], "params": params}), flush=True)
