"""The repository layer: finding and loading models.

loader   model folders, version folders, config completion and loading a
         model's versions with their backend instances
manager  ModelManager: the loaded models, model control (none, explicit,
         poll), parallel loads, reloads that keep serving, the index
remote/  repositories in object storage (s3://, gs://, as://), each kept as
         a local copy that the manager scans like a folder
"""
