"""The OCI distribution API client: image references (:mod:`.reference`), one request under the transport policy
(:mod:`.transport`: deadlines, retries, bounded answers), credentials and bearer tokens (:mod:`.auth`,
:mod:`.tokens`, :mod:`.challenge`), the client itself (:mod:`.client`: manifests and blobs, uploads chunked by
:mod:`.chunked`), a manifest's digest by HEAD alone (:mod:`.head`) and a blob read as several ranges at once
(:mod:`.blobstream`). It knows nothing of images, artifacts or stores."""
